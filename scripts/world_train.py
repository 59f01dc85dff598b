from pathlib import Path

from snakemake.script import snakemake

from selfknow.runlog import job_log
from selfknow.world.trainer import train_family

with job_log(snakemake.log[0], f"world_train {snakemake.wildcards.family}") as summary:
    train_family(Path(snakemake.input[0]).parent, dict(snakemake.params.family), snakemake.output[0],
                 threads=snakemake.threads)
