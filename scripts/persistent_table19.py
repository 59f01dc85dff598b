# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import table19_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

out, cfg = snakemake.output, snakemake.config
pc = cfg["persistent"]
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "persistent_table19") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], models=pc["models"][:1],
                          datasets=pc["datasets"][:1])
    summary.update(table19_job(list(snakemake.input), out.table19_csv, out.table19_md, title=snakemake.params.title,
                               provenance=prov))
