# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import table_job
from selfknow.runlog import job_log

p, w = snakemake.params, snakemake.wildcards
files = {tuple(k.split("__")): v for k, v in snakemake.input.items()}
with job_log(snakemake.log[0], f"persistent_table {w.table}") as summary:
    summary.update(table_job(w.table, files, list(p.models), list(p.datasets), p.transfer,
                             snakemake.output.csv, snakemake.output.md, min_contrast=p.min_contrast,
                             min_contrast_transfer=p.min_contrast_transfer))
