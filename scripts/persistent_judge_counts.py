# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import judge_count_job
from selfknow.runlog import job_log

w = snakemake.wildcards
with job_log(snakemake.log[0], f"persistent_judge_counts {w.model} {w.dataset}/{w.evalset}") as summary:
    summary.update(judge_count_job(snakemake.params.sc, snakemake.output[0]))
