# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import figure3_job
from selfknow.runlog import job_log

p, out = snakemake.params, snakemake.output
with job_log(snakemake.log[0], "persistent_figure3") as summary:
    summary.update(figure3_job(snakemake.input.transfer, snakemake.input.random_label, list(p.order), out.png,
                               out.figure3_csv, out.figure3_md, title=p.title))
