# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from pathlib import Path

from selfknow.items import deduplicate, load_source, split_items
from selfknow.records import write_parquet
from selfknow.runlog import job_log

with job_log(snakemake.log[0], f"items {snakemake.wildcards.dataset}") as summary:
    world_dir = Path(snakemake.input[0]).parent if snakemake.input else None
    items = deduplicate(load_source(snakemake.wildcards.dataset, dict(snakemake.params.spec), world_dir))
    for split, df in split_items(items, snakemake.params.seed).items():
        write_parquet(df, snakemake.output[split])
        summary[split] = len(df)
