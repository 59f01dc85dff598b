# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import gcm_job
from selfknow.runlog import job_log

p, w, out = snakemake.params, snakemake.wildcards, snakemake.output
sc_paths = {k.replace("__", ":"): v for k, v in snakemake.input.items() if k.split("__")[0] in ("train", "test")}
with job_log(snakemake.log[0], f"persistent_gcm {w.model} {w.dataset} seed {w.seed}") as summary:
    summary.update(gcm_job(dict(p.gcm_spec), list(p.train_ckpts), list(p.eval_ckpts), sc_paths, out.adapter,
                           out.conf, seed=int(w.seed), cache_dir=p.cache, threads=snakemake.threads,
                           hparams=dict(p.adapter)))
