# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.jobs import prompted_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"ladder_prompted {snakemake.wildcards.model}") as summary:
    summary.update(prompted_job(snakemake.input.turns, dict(p.spec), snakemake.output.profiles,
                                snakemake.output.query, model=snakemake.wildcards.model, mode=p.mode,
                                max_new_tokens=p.max_new_tokens, lsa_query_sessions=p.lsa_query_sessions,
                                prompted_sessions=p.prompted_sessions, lsa_controls=p.lsa_controls,
                                seed=p.seed, cache_dir=p.cache))
