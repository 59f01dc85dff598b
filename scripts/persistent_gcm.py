# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import gcm_job
from selfknow.runlog import job_log

p, w, out = snakemake.params, snakemake.wildcards, snakemake.output
with job_log(snakemake.log[0], f"persistent_gcm {w.model} {w.dataset} seed {w.seed}") as summary:
    summary.update(gcm_job(dict(p.gcm_spec), list(p.train_ckpts), list(p.eval_ckpts), p.sc, out.adapter,
                           out.conf, seed=int(w.seed), cache_dir=p.cache, threads=snakemake.threads,
                           hparams=dict(p.adapter)))
