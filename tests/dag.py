"""The jobs of a config's DAG, for tests that inspect it without running it."""
from conftest import REPO


def dag_jobs(configfile, results, target: str = "all_tables") -> list:
    """The jobs of `target` for `configfile`, built as `snakemake -n` builds them. Snakemake
    has no public API that returns a DAG's jobs: this calls the steps `printdag` runs."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow_api = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=REPO / "Snakefile",
                                    config_settings=ConfigSettings(configfiles=[configfile],
                                                                   config={"results": str(results)}),
                                    workdir=REPO)
        workflow_api.dag(DAGSettings(targets={target}))
        workflow = workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        return list(workflow.dag.jobs)
