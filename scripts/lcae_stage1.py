# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.lcae.jobs import stage1_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"lcae_stage1 {snakemake.wildcards.model}@{snakemake.wildcards.ckpt}") as summary:
    summary.update(stage1_job(snakemake.input.sample, dict(p.spec), snakemake.wildcards.ckpt, list(p.strategies),
                              snakemake.output[0], cache_dir=p.cache, max_new_tokens=p.max_new_tokens))
