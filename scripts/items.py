# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from pathlib import Path

from selfknow.stages.items import build_items
from selfknow.records import write_parquet
from selfknow.runlog import job_log

with job_log(snakemake.log[0], f"items {snakemake.wildcards.dataset}") as summary:
    world_dir = Path(snakemake.input[0]).parent if snakemake.input else None
    splits = build_items(snakemake.wildcards.dataset, dict(snakemake.params.spec), snakemake.params.seed, world_dir)
    for split, df in splits.items():
        write_parquet(df, snakemake.output[split])
        summary[split] = len(df)
