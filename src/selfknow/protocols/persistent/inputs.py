"""Typed named inputs of the persistent rules (and of the card, which reads their metrics).

A job that must know which of its input files is which (the SC table of which checkpoint and
split, the metric files of which model and dataset) receives them as one mapping key -> path:
the key is one of the NamedTuples below (or a model name), the value a path or, for files that
come as a set, a NamedTuple of paths (`MetricFiles`, `EvalFiles`). One function of the rules
builds the mapping; the rule gives `input:` its flat path list (`input_paths`, for the DAG) and
`params:` the mapping itself (for the job), so the two cannot disagree. Keys and values are
tuples of strings: they pickle into the job's script as they are, and their repr, which Snakemake
records to rerun a job whose params changed, is the same on every run.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple


class ScInput(NamedTuple):
    """An SC table read by a job of one (model, training dataset): answers of `checkpoint` to
    the `split` questions of `dataset`, `variants.MAIN` (the job's training dataset) or
    `variants.TRANSFER` (the transfer dataset)."""

    dataset: str
    split: str
    checkpoint: str


class ScTable(NamedTuple):
    """An SC table named by the wildcards of its path (`persistent_sc` writes both splits of a
    checkpoint's dataset), for the jobs that read several models' or datasets' answers
    (Table 7, Figure 2)."""

    model: str
    checkpoint: str
    dataset: str
    split: str


class Evaluation(NamedTuple):
    """One `persistent_metrics` job: `model` trained on `dataset`, scored on `evalset`
    (`variants.MAIN` or `variants.TRANSFER`)."""

    model: str
    dataset: str
    evalset: str


class MetricFiles(NamedTuple):
    """The point estimates and bootstrap replicates one `persistent_metrics` job writes."""

    metrics: str
    replicates: str


class EvalFiles(NamedTuple):
    """Every file a table reads about one `Evaluation`: its `MetricFiles`, its contrast-set
    sizes and its judge counts (`persistent_judge_counts`)."""

    metrics: str
    replicates: str
    contrast: str
    judge: str


def paths_of(inputs: Mapping[Any, str | tuple[str, ...]]) -> list[str]:
    """The paths of a key -> path (or NamedTuple of paths) mapping, in its order."""
    out = []
    for value in inputs.values():
        out.extend(value if isinstance(value, tuple) else (value,))
    return out


def input_paths(get_inputs: Callable[[Any], Mapping]) -> Callable[[Any], list[str]]:
    """The input function for `input:` of a rule whose `params:` take `get_inputs` (an input
    function returning a typed mapping): the flat list of that mapping's paths."""

    def paths(wildcards) -> list[str]:
        return paths_of(get_inputs(wildcards))

    return paths
