# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.lcae.jobs import stage3_job
from selfknow.runlog import job_log

with job_log(snakemake.log[0], "lcae_stage3") as summary:
    summary.update(stage3_job(list(snakemake.input.stage2), snakemake.input.persons, snakemake.input.item_params,
                              snakemake.output[0], eps=snakemake.params.eps))
