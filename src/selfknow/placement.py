"""What one workflow job asks the scheduler for, from the models it loads (docs/resources.md):
the one place where GPUs, memory and the SLURM partition of a job are decided.

A rule whose job loads models declares them (`rules/common.smk`, `model_resources`), with the
same input functions that hand the specs to its job; everything else follows:

- GPUs: the sum of the `gpu` entries of the models the job loads (every model a job loads is
  resident until the job ends: a local judge, a second model), so a job of API models alone
  asks for none;
- memory: the sum of their memory requests (`registry.estimate_mem_mb`, with the number of base
  copies each one keeps resident); a job that, in this run, loads none of them (a rule-based
  LADDER user) asks for a Python process's `MEM_OVERHEAD_MB`;
- partition: a job with GPUs goes to `SELFKNOW_SLURM_GPU_PARTITION` (unset: the partition of
  every job, `SELFKNOW_SLURM_PARTITION`, or the cluster's default) with the GPU type
  `SELFKNOW_SLURM_GPU_MODEL`; a job without goes to `SELFKNOW_SLURM_PARTITION`. Rules that load
  no model get that partition from the profile's default-resources (profiles/slurm/config.yaml).

The partitions are site settings and come from the environment, like the profile's; on a local
run they are unset and the scheduler resources are simply not used.
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping, Sequence

from selfknow.models.registry import MEM_OVERHEAD_MB, estimate_mem_mb

PARTITION_ENV = "SELFKNOW_SLURM_PARTITION"
GPU_PARTITION_ENV = "SELFKNOW_SLURM_GPU_PARTITION"
GPU_MODEL_ENV = "SELFKNOW_SLURM_GPU_MODEL"


def job_gpus(loads: Iterable[tuple[dict, int]]) -> int:
    """GPUs of a job holding each (model spec, base copies) of `loads` at once."""
    return sum(int(spec["gpu"]) for spec, _ in loads)


def job_mem_mb(loads: Iterable[tuple[dict, int]]) -> int:
    """Host memory (MB) of a job holding each (model spec, base copies) of `loads` at once."""
    return sum(estimate_mem_mb(spec, bases=bases) for spec, bases in loads) or MEM_OVERHEAD_MB


def partition(gpus: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The SLURM partition of a job with `gpus` GPUs; None: the cluster's default."""
    cpu = environ.get(PARTITION_ENV) or None
    return (environ.get(GPU_PARTITION_ENV) or cpu) if gpus else cpu


def scratch_request(mb: int) -> str:
    """The sbatch option asking for `mb` MB of node-local scratch ($TMPDIR), for the SLURM
    plugin's `slurm_extra` (it maps no resource to --tmp); "" for none."""
    return f"--tmp={mb}M" if mb > 0 else ""


def join_slurm_extra(*options: str | None) -> str:
    """One `slurm_extra` from several (the site's, a job's own), in order, empty ones left out."""
    return " ".join(o.strip() for o in options if o and o.strip())


def gpu_model(gpus: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The GPU type a job with `gpus` GPUs asks for (--gpus=TYPE:N); None: any type."""
    return (environ.get(GPU_MODEL_ENV) or None) if gpus else None


def runtime_key(stage: str, wildcards: Mapping[str, str]) -> str:
    """The key of a job's time limit in the plan's runtimes file (`selfknow.plan.runtime_limits`,
    read by rules/common.smk, planned_runtime): its plan stage and wildcards."""
    return f"{stage}|" + "|".join(f"{k}={v}" for k, v in sorted(wildcards.items()))


def slurm_logdir(argv: Sequence[str], cwd: str | os.PathLike = ".") -> str:
    """`<results>/logs/slurm` of the run `argv` (a `snakemake` command line) starts, for the
    profile's `slurm-logdir`: `results` from `--config results=...`, else from the last
    `--configfile` that sets it, else from the default config.yaml (`cwd`'s), else the schema's
    default; so SLURM's logs sit beside the run's own logs wherever `results:` points."""
    files, overrides, current = [], {}, None
    for arg in argv[1:]:
        if arg.startswith("-"):
            key, _, value = arg.partition("=")
            current = {"--configfile": files, "--configfiles": files, "--config": "config"}.get(key)
            if value and current is not None:
                files.append(value) if current is files else overrides.update([value.split("=", 1)])
            continue
        if current is files:
            files.append(arg)
        elif current == "config" and "=" in arg:
            overrides.update([arg.split("=", 1)])
    results = overrides.get("results") or config_results(files or ["config.yaml"], cwd)
    return os.path.join(str(results), "logs", "slurm")


def config_results(configfiles: Sequence[str | os.PathLike], cwd: str | os.PathLike = ".") -> str:
    """The `results:` the config files set (the last that sets it; relative to `cwd`, the
    working directory, when relative), else the schema's default: where a run of them writes
    when the command line does not say otherwise."""
    import yaml

    for f in reversed(list(configfiles)):
        try:
            with open(os.path.join(cwd, f), encoding="utf-8") as fh:
                results = (yaml.safe_load(fh) or {}).get("results")
        except OSError:
            continue
        if results is not None:
            return str(results)
    return "results"


def runtimes_files(results: str, configfiles: Sequence[str | os.PathLike]) -> list[str]:
    """Where the rules look for the plan's time limits (`selfknow plan`'s runtimes file), in
    order: under the run's `results`, then under the `results:` of its config files, where
    `selfknow plan CONFIG` writes by default; so a run launched with `--config
    results=ELSEWHERE` keeps the limits of its config's plan (the limits depend on the config,
    not on where its outputs go)."""
    own = os.path.join(config_results(configfiles), "plan", "runtimes.json")
    run = os.path.join(str(results), "plan", "runtimes.json")
    return [run] if os.path.abspath(own) == os.path.abspath(run) else [run, own]
