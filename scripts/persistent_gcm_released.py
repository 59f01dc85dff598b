# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import released_gcm_job
from selfknow.runlog import job_log

p, w, out = snakemake.params, snakemake.wildcards, snakemake.output
with job_log(snakemake.log[0], f"persistent_gcm_released {w.model} {w.dataset}") as summary:
    summary.update(released_gcm_job(dict(p.gcm_spec), dict(p.adapter), list(p.train_ckpts), list(p.eval_ckpts), p.sc,
                                    out.conf, cache_dir=p.cache, threads=snakemake.threads))
