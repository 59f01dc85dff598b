# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import metrics_job
from selfknow.runlog import job_log

p, w, out = snakemake.params, snakemake.wildcards, snakemake.output
with job_log(snakemake.log[0], f"persistent_metrics {w.model} {w.dataset} {w.evalset}") as summary:
    summary.update(metrics_job(list(p.eval_ckpts), list(p.train_ckpts), p.sc, list(snakemake.input.confs),
                               list(snakemake.input.gcm), out.metrics, out.replicates, out.contrast, out.records,
                               evalset=w.evalset,
                               min_contrast=p.min_contrast, n_boot=p.n_boot, n_boot_ece=p.n_boot_ece, seed=p.seed,
                               equivalence=p.equivalence, normalisation=p.normalisation,
                               clamp=p.clamp, bt_max_iter=p.bt_max_iter))
