# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import reliability_job
from selfknow.report.provenance import job_provenance
from selfknow.runlog import job_log

p, w, out, cfg = snakemake.params, snakemake.wildcards, snakemake.output, snakemake.config
gcm_model = cfg["persistent"].get("gcm_model")
with job_log(snakemake.log[0], f"persistent_reliability {w.model} {w.dataset}") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], datasets=[w.dataset],
                          models=list(dict.fromkeys([w.model] + ([gcm_model] if gcm_model else []))))
    summary.update(reliability_job(list(p.eval_ckpts), list(p.train_ckpts), p.sc, list(snakemake.input.confs),
                                   list(snakemake.input.gcm), out.reliability,
                                   title=p.title,
                                   seed=p.seed, equivalence=p.equivalence, normalisation=p.normalisation,
                                   provenance=prov))
