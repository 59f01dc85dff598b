"""The jobs of a workflow target, built as `snakemake -n` builds them, for tests that look at
every job's params and resources without running anything."""
from __future__ import annotations

from pathlib import Path

from conftest import REPO


def dag_jobs(configfile: Path, results: Path, default_resources: list[str] | None = None, target: str = "all_tables",
             *, forceall: bool = False):
    """The jobs of `target` for `configfile` (outputs under `results`), with `default_resources`
    ("name=value", as a profile's default-resources) for the rules that set none; every job with
    `forceall`, as for an empty results directory. Snakemake has no public API that returns a
    DAG's jobs: this calls the steps `printdag` runs."""
    from snakemake.api import SnakemakeApi
    from snakemake.resources import Resources
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    defaults = Resources.parse(default_resources, allow_expressions=True, defaults="full") if default_resources else None
    with SnakemakeApi(OutputSettings()) as api:
        workflow_api = api.workflow(resource_settings=ResourceSettings(cores=1, default_resources=defaults),
                                    snakefile=REPO / "Snakefile",
                                    config_settings=ConfigSettings(configfiles=[configfile],
                                                                   config={"results": str(results)}),
                                    workdir=REPO)
        workflow_api.dag(DAGSettings(targets={target}))
        workflow = workflow_api._workflow
        workflow._prepare_dag(forceall=forceall, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        return list(workflow.dag.jobs)
