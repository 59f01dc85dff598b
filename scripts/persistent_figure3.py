# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import figure3_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
pc = cfg["persistent"]
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "persistent_figure3") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], models=pc["models"][:1],
                          datasets=pc["datasets"][:1])
    summary.update(figure3_job(snakemake.input.transfer, snakemake.input.random_label, list(p.order), out.figure3,
                               out.figure3_csv, out.figure3_md, title=p.title, provenance=prov))
