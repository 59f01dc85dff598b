# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.runlog import job_log
from selfknow.world.evolution import write_evolution_table

with job_log(snakemake.log[0], "world_evolution_table") as summary:
    summary.update(write_evolution_table(dict(snakemake.input.items()), dict(snakemake.params.checkpoints),
                                         snakemake.params.n_train, snakemake.output.evolution_csv,
                                         snakemake.output.evolution_md))
