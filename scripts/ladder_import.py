# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.tables import import_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_import") as summary:
    # the released sessions are this job's input: their directory is fingerprinted
    prov = job_provenance(cfg, [p.import_dir], sections=["ladder_import_dir", "ladder_import_estimators"])
    summary.update(import_job(p.import_dir, out.import_aggregates_csv, out.import_aggregates_md,
                              list(p.estimators) or None, provenance=prov))
