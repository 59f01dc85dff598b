# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.stages.jobs import greedy_job
from selfknow.runlog import job_log

p, w = snakemake.params, snakemake.wildcards
with job_log(snakemake.log[0], f"generate_greedy {w.model}@{w.ckpt} {w.dataset}") as summary:
    summary.update(greedy_job(snakemake.input.test, snakemake.input.train, dict(p.spec), w.ckpt, snakemake.output[0],
                              n_shots=p.n_shots, n_items=p.n_items, seed=p.seed, max_new_tokens=p.max_new_tokens,
                              cache_dir=p.cache))
