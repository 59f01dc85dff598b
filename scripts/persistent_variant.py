# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import variant_job
from selfknow.runlog import job_log

p, w, out = snakemake.params, snakemake.wildcards, snakemake.output
variant = getattr(w, "variant", "transfer")
with job_log(snakemake.log[0], f"persistent_variant {w.model} {w.dataset} {variant} seed {w.seed}") as summary:
    summary.update(variant_job(variant, dict(p.spec), list(p.train_ckpts), list(p.eval_ckpts), p.sc,
                               out.adapters, out.get("conf"), seed=int(w.seed), cache_dir=p.cache,
                               threads=snakemake.threads, pair_mode=p.pair_mode, hparams=dict(p.adapter),
                               hidden_out=out.get("hidden"), variance_items=p.get("variance_items", 0)))
