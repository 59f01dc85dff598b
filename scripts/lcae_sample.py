# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.lcae.jobs import sample_job
from selfknow.runlog import job_log

with job_log(snakemake.log[0], "lcae_sample") as summary:
    summary.update(sample_job(snakemake.input[0], snakemake.params.n_items, snakemake.params.seed, snakemake.output[0]))
