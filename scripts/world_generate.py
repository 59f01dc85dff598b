# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from pathlib import Path

from selfknow.runlog import job_log
from selfknow.world.generator import generate_world

with job_log(snakemake.log[0], "world_generate") as summary:
    generate_world(dict(snakemake.params.world), Path(snakemake.output.corpus).parent)
