# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import variant_slice_job
from selfknow.runlog import job_log

p, w = snakemake.params, snakemake.wildcards
with job_log(snakemake.log[0], f"persistent_variant_slice {w.model} {w.dataset} {w.variant} seed {w.seed}") as summary:
    summary.update(variant_slice_job(w.variant, list(p.train_ckpts), list(p.eval_ckpts), snakemake.input.transfer,
                                     snakemake.output.conf))
