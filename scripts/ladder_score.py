# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.jobs import score_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"ladder_score {snakemake.wildcards.model}") as summary:
    summary.update(score_job(snakemake.input.turns, snakemake.input.alt, snakemake.input.profiles,
                             snakemake.input.query, dict(snakemake.output.items()), seed=p.seed,
                             latent_query=p.latent_query, session_bootstrap_draws=p.session_bootstrap,
                             cluster_bootstrap_draws=p.cluster_bootstrap,
                             cluster_estimators=list(p.cluster_estimators), flips=list(p.flips),
                             coverages=list(p.coverages), noise_repeats=p.noise_repeats,
                             grid_sessions=p.grid_sessions, grid_estimators=list(p.grid_estimators),
                             random_partitions=p.random_partitions,
                             partition=None if p.partition is None else dict(p.partition),
                             prefix_step=p.prefix_step, prefix_estimators=list(p.prefix_estimators)))
