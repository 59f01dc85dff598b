# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import table7_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "persistent_table7") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], models=list(p.models),
                          datasets=list(p.datasets))
    summary.update(table7_job(p.sc, list(p.models), {m: list(c) for m, c in p.checkpoints.items()}, p.n_train,
                              list(p.datasets), out.table7_csv, out.table7_md, transfer=p.transfer, title=p.title,
                              provenance=prov))
