"""What one workflow job asks the scheduler for, from the models it loads (docs/resources.md):
the one place where GPUs, memory and the SLURM partition of a job are decided.

A rule whose job loads models declares them (`rules/common.smk`, `model_resources`), with the
same input functions that hand the specs to its script; everything else follows:

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
from typing import Iterable, Mapping

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


def gpu_model(gpus: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The GPU type a job with `gpus` GPUs asks for (--gpus=TYPE:N); None: any type."""
    return (environ.get(GPU_MODEL_ENV) or None) if gpus else None
