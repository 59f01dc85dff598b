# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.crosstask import crosstask_job
from selfknow.runlog import job_log

p, w = snakemake.params, snakemake.wildcards
with job_log(snakemake.log[0], f"ladder_crosstask {w.suite} {w.model}") as summary:
    summary.update(crosstask_job(list(snakemake.input.pool), p.loader, dict(p.spec),
                                 None if p.prompt_spec is None else dict(p.prompt_spec),
                                 snakemake.output.answers, snakemake.output.prior, model=w.model, suite=w.suite,
                                 domains=list(p.suite["domains"]), items_per_domain=p.items_per_domain, seed=p.seed,
                                 max_new_tokens=p.max_new_tokens, bbh_lenient=p.bbh_lenient, prior_mode=p.prior_mode,
                                 prior_max_new_tokens=p.prior_max_new_tokens,
                                 l1_profiles=snakemake.input.l1[0] if snakemake.input.l1 else None, cache_dir=p.cache))
