"""The jobs of a workflow target, as Snakemake builds them (`snakemake --dry-run --forceall`),
without running anything: each job's rule, wildcards, params and files.

`selfknow plan` counts requests over these jobs, so which jobs exist, what they read and
where they write is written once, in the rules."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

#: the workflow's root: the Snakefile, rules/ and workflow_report/ (an editable install's checkout)
WORKFLOW_ROOT = Path(__file__).resolve().parents[2]


class DagError(ValueError):
    """Snakemake cannot build the DAG (an unknown target, an invalid config, a missing input)."""


@contextmanager
def snakemake_dag(configfile: str | Path, target: str = "all_tables", *, results: str | Path | None = None,
                  default_resources: list[str] | None = None, forceall: bool = True,
                  root: Path = WORKFLOW_ROOT) -> Iterator[list]:
    """The Snakemake jobs of `target` for `configfile` (outputs under `results`, else the
    config's), with `default_resources` ("name=value", as a profile's default-resources) for
    the rules that set none; every job with `forceall`, as for an empty results directory.
    Inside the context the working directory is `root`, where input functions and lazily
    evaluated params expect it. Snakemake has no public API that returns a DAG's jobs: this
    runs the steps its `printdag` runs."""
    from snakemake.api import SnakemakeApi
    from snakemake.exceptions import RuleException, WorkflowError
    from snakemake.resources import Resources
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    defaults = Resources.parse(default_resources, allow_expressions=True, defaults="full") if default_resources else None
    overrides = {} if results is None else {"results": os.path.abspath(results)}
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow_api = api.workflow(resource_settings=ResourceSettings(cores=1, default_resources=defaults),
                                    snakefile=root / "Snakefile",
                                    config_settings=ConfigSettings(configfiles=[Path(configfile).resolve()],
                                                                   config=overrides),
                                    workdir=root)
        try:
            workflow_api.dag(DAGSettings(targets={target}))
            workflow = workflow_api._workflow
            workflow._prepare_dag(forceall=forceall, ignore_incomplete=True, lock_warn_only=True, nolock=True)
            workflow._build_dag()
        except (RuleException, WorkflowError) as err:
            raise DagError(f"{configfile}, target {target}: Snakemake builds no DAG: {err}") from None
        yield list(workflow.dag.jobs)


@dataclass(frozen=True)
class DagJob:
    """One job as the plan reads it: plain values, detached from Snakemake."""

    rule: str
    wildcards: Mapping[str, str]
    params: Mapping[str, Any]
    inputs: Mapping[str, list[str]]
    #: the named output files, absolute (a list where a name covers several, one per seed)
    outputs: Mapping[str, str | list[str]]
    #: every output file, absolute; the job is done when all exist
    files: tuple[str, ...]
    #: whether the rule runs nothing (a target rule such as all_tables)
    norun: bool
    #: the scheduler resources Snakemake gives the job (runtime in minutes, mem_mb, gpu, ...)
    resources: Mapping[str, Any] = None

    @property
    def done(self) -> bool:
        return all(os.path.exists(f) for f in self.files)


def _named(namedlist) -> dict[str, Any]:
    return {name: namedlist[name] for name in namedlist.keys()}


def workflow_jobs(configfile: str | Path, target: str = "all_tables", *, results: str | Path | None = None,
                  root: Path = WORKFLOW_ROOT, default_resources: list[str] | None = None) -> list[DagJob]:
    """Every job of `target` for `configfile` (`snakemake_dag` with `forceall` and
    `default_resources`), in a stable order: by rule, then wildcards."""
    with snakemake_dag(configfile, target, results=results, root=root, default_resources=default_resources) as jobs:
        out = [DagJob(rule=j.rule.name, wildcards=dict(j.wildcards_dict), params=_named(j.params),
                      inputs={k: list(v) if isinstance(v, list) else [v] for k, v in _named(j.input).items()},
                      outputs={k: [os.path.abspath(f) for f in v] if isinstance(v, list) else os.path.abspath(v)
                               for k, v in _named(j.output).items()},
                      files=tuple(os.path.abspath(f) for f in j.output),
                      norun=j.rule.norun,
                      resources={k: v for k, v in j.resources.items() if not k.startswith("_")})
               for j in jobs]
    return sorted(out, key=lambda j: (j.rule, sorted(j.wildcards.items())))
