# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.jobs import answers_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"ladder_answers {snakemake.wildcards.model}") as summary:
    summary.update(answers_job(snakemake.input.pool, dict(p.spec), snakemake.output[0], n_sessions=p.n_sessions,
                               alt_sessions=p.alt_sessions, n_turns=p.n_turns, items_per_domain=p.items_per_domain,
                               seed=p.seed, answering=dict(p.answering),
                               tiers=None if p.tiers is None else dict(p.tiers), parts_dir=p.parts,
                               cache_dir=p.cache))
