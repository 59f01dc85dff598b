"""The jobs of a workflow target, built as `snakemake -n` builds them, for tests that look at
every job's params and resources without running anything."""
from __future__ import annotations

from pathlib import Path

from conftest import REPO

from selfknow.dag import snakemake_dag


def dag_jobs(configfile: Path, results: Path, default_resources: list[str] | None = None, target: str = "all_tables",
             *, forceall: bool = False):
    """The Snakemake jobs of `target` for `configfile` (outputs under `results`), with
    `default_resources` ("name=value", as a profile's default-resources) for the rules that set
    none; every job with `forceall`, as for an empty results directory."""
    with snakemake_dag(configfile, target, results=results, default_resources=default_resources,
                       forceall=forceall, root=REPO) as jobs:
        return jobs
