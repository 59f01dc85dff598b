# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from pathlib import Path

from selfknow.runlog import job_log
from selfknow.world.trainer import train_family

with job_log(snakemake.log[0], f"world_train {snakemake.wildcards.family}"):
    train_family(Path(snakemake.input[0]).parent, {**snakemake.params.family, "threads": snakemake.threads},
                 snakemake.output[0])
