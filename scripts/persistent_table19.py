# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import table19_job
from selfknow.runlog import job_log

out = snakemake.output
with job_log(snakemake.log[0], "persistent_table19") as summary:
    summary.update(table19_job(list(snakemake.input), out.table19_csv, out.table19_md, title=snakemake.params.title))
