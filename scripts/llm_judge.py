# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.stages.jobs import llm_judge_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], "llm_judge") as summary:
    summary.update(llm_judge_job(list(snakemake.input.generations), snakemake.input.test, dict(p.spec),
                                 snakemake.output[0], n_items=p.n_items, seed=p.seed, cache_dir=p.cache,
                                 label_modes=list(p.label_modes), multi_reference=p.multi_reference))
