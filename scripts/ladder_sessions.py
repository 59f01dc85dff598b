# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.jobs import sessions_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"ladder_sessions {snakemake.wildcards.model}") as summary:
    summary.update(sessions_job(snakemake.input.answers, snakemake.input.pool, snakemake.output.main,
                                snakemake.output.alt, model=snakemake.wildcards.model, n_sessions=p.n_sessions,
                                n_turns=p.n_turns, items_per_domain=p.items_per_domain, seed=p.seed, user=p.user,
                                alt_sessions=p.alt_sessions, user_spec=None if p.user_spec is None else dict(p.user_spec),
                                user_max_new_tokens=p.user_max_new_tokens, parts_dir=p.parts, cache_dir=p.cache))
