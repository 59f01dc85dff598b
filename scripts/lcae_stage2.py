# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.lcae.jobs import stage2_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"lcae_stage2 {snakemake.wildcards.model}@{snakemake.wildcards.ckpt}") as summary:
    summary.update(stage2_job(snakemake.input.sample, snakemake.input.stage1, snakemake.input.irt, dict(p.spec),
                              snakemake.wildcards.ckpt, snakemake.output[0], conditions=list(p.conditions),
                              repeats=p.repeats, cache_dir=p.cache, reflection=p.reflection,
                              temperature=p.temperature, max_new_tokens=p.max_new_tokens,
                              base_slow_below=p.base_slow_below, base_error_p=p.base_error_p))
