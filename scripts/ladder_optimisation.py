# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.optimisation import optimisation_job
from selfknow.runlog import job_log

p = snakemake.params
o = p.optimisation
with job_log(snakemake.log[0], f"ladder_optimisation {snakemake.wildcards.model}") as summary:
    summary.update(optimisation_job(snakemake.input.turns, snakemake.output[0], seed=p.seed,
                                    restarts=o["restarts"], max_iter=o["max_iter"], tol=o["tol"],
                                    glad_priors=o["glad_priors"], sessions=o["sessions"]))
