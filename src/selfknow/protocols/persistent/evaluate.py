"""The persistent paper's evaluation of confidence methods on evaluation checkpoints: the one
entry point of the workflow's metrics job (`jobs.metrics_job`) and of `selfknow
persistent-eval` (`own_records`), so the two cannot drift.

Both go through plain records (`selfknow.readers.plain`): the job turns the confidences it
assembles into records (`records_frame`, also its output), and both turn records into
arrays (`record_arrays`) and evaluate them (`evaluate`): knowledge contrast sets for every
pair of evaluation checkpoints, the ten metrics under Eq. 1 and the fitted §B.1
normalisation, and the paired stratified bootstrap of §A.8.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.stats.persistent.contrast import ContrastPair

from .metrics import compute_metrics, contrast_size_frame


@dataclass(frozen=True)
class Confidences:
    """One evaluation: `items` (sorted ids), `checkpoints` (in training order), `correct`
    (n_checkpoints, n_items) 0/1 and `methods` method -> (n_seeds, n_checkpoints, n_items)."""

    items: np.ndarray
    checkpoints: list[str]
    correct: np.ndarray
    methods: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """What `evaluate` returns: point metrics (long: normaliser, method, metric, value,
    n_seeds, n_items, n_pairs), bootstrap replicates ("<normaliser>|<method>|<metric>" -> (B,)),
    the contrast-set sizes of every ordered checkpoint pair (`contrast_size_frame`) and the
    pairs the contrast metrics average over."""

    points: pd.DataFrame
    replicates: dict[str, np.ndarray]
    contrast: pd.DataFrame
    pairs: list[ContrastPair]


# ----------------------------------------------------------------------------------------------
# records <-> arrays
# ----------------------------------------------------------------------------------------------
def records_frame(conf: Confidences, dataset: str | None = None) -> pd.DataFrame:
    """Plain records of `conf`: one row per (method, seed, checkpoint, item), role "eval",
    `seed` the seed's index (0, 1, ...), `dataset` when given."""
    frames = []
    k, n = conf.correct.shape
    for m, c in conf.methods.items():
        c = np.asarray(c, dtype=float)
        if c.ndim != 3 or c.shape[1:] != (k, n):
            raise ValueError(f"method {m!r}: confidences of shape {c.shape}, correctness {(k, n)}")
        s = c.shape[0]
        frames.append(pd.DataFrame({
            "item": np.tile(np.asarray(conf.items, dtype=str), s * k),
            "checkpoint": np.tile(np.repeat(np.asarray(conf.checkpoints, dtype=str), n), s),
            "method": m, "correct": np.tile(conf.correct.ravel(), s).astype(np.int8),
            "confidence": c.ravel(), "role": "eval", "seed": np.repeat(np.arange(s), k * n)}))
    df = pd.concat(frames, ignore_index=True)
    if dataset is not None:
        df.insert(df.columns.get_loc("role") + 1, "dataset", dataset)
    return df


def record_arrays(records: pd.DataFrame) -> dict[str, Confidences]:
    """Dataset -> `Confidences` of checked plain records (`readers.plain.read_plain`; ""
    without a dataset column), in order of first appearance. Evaluation checkpoints are those
    of role "eval", in order of first appearance (training order: the contrast sets' "early"
    and "late"); items are sorted. Raises ValueError naming the file, row and column where a
    checkpoint has fewer than two questions, where one answer's correctness differs between
    methods, where a checkpoint lacks a question another one answers, or where a method (and
    seed) lacks a confidence."""
    source = records.attrs.get("source", "records")
    datasets = records["dataset"] if "dataset" in records.columns else pd.Series("", index=records.index)
    out = {}
    for d in pd.unique(datasets):
        part = records[(datasets == d).to_numpy()]
        out[d] = _confidences(part, source, f" (dataset {d!r})" if d else "")
    return out


def _confidences(df: pd.DataFrame, source: str, ds: str) -> Confidences:
    if "role" in df.columns:
        df = df[(df["role"] == "eval").to_numpy()]
    if df.empty:
        raise ValueError(f"{source}: no rows of role 'eval'{ds}")
    where = df.index
    ckpts = [str(c) for c in pd.unique(df["checkpoint"])]
    for c in ckpts:
        mine = df[(df["checkpoint"] == c).to_numpy()]
        if mine["item"].nunique() < 2:
            raise ValueError(f"{source}: {mine.index[0]}, column 'checkpoint': checkpoint {c!r}{ds} has one question "
                             f"({mine['item'].iloc[0]!r}); the metrics need at least two questions per checkpoint")
    items = np.array(sorted(pd.unique(df["item"])), dtype=str)
    k, n = len(ckpts), items.size
    cell = (pd.Index(ckpts).get_indexer(df["checkpoint"]) * n
            + pd.Index(items).get_indexer(df["item"]))
    y = df["correct"].to_numpy(dtype=float)
    lo = np.full(k * n, np.inf)
    hi = np.full(k * n, -np.inf)
    np.minimum.at(lo, cell, y)
    np.maximum.at(hi, cell, y)
    clash = np.flatnonzero(lo != hi)
    clash = clash[np.isfinite(lo[clash])]
    if clash.size:
        rows = np.flatnonzero(cell == clash[0])
        a = rows[0]
        b = rows[np.flatnonzero(y[rows] != y[a])[0]]
        raise ValueError(f"{source}: {where[b]}, column 'correct': {int(y[b])} where {where[a]} (method "
                         f"{df['method'].iloc[a]!r}) has {int(y[a])} for item {df['item'].iloc[a]!r} at checkpoint "
                         f"{df['checkpoint'].iloc[a]!r}{ds}; correctness belongs to the answer, the same for every method")
    absent = np.flatnonzero(~np.isfinite(lo))
    if absent.size:
        c, i = divmod(int(absent[0]), n)
        other = where[np.flatnonzero(df["item"].to_numpy() == items[i])[0]]
        raise ValueError(f"{source}: no row for item {str(items[i])!r} at checkpoint {ckpts[c]!r}{ds}, which {other} "
                         f"has for another checkpoint; every evaluation checkpoint needs every question (column 'item')")
    correct = lo.reshape(k, n)
    seed = df["seed"].to_numpy() if "seed" in df.columns else np.zeros(len(df), dtype=np.int64)
    methods: dict[str, np.ndarray] = {}
    for m in pd.unique(df["method"]):
        is_m = (df["method"] == m).to_numpy()
        stacked = []
        for s in np.unique(seed[is_m]):
            rows = np.flatnonzero(is_m & (seed == s))
            conf = np.full(k * n, np.nan)
            conf[cell[rows]] = df["confidence"].to_numpy(dtype=float)[rows]
            gap = np.flatnonzero(np.isnan(conf))
            if gap.size:
                c, i = divmod(int(gap[0]), n)
                seeds = f", seed {s}" if "seed" in df.columns else ""
                raise ValueError(f"{source}: method {m!r}{seeds}{ds} has no row for item {str(items[i])!r} at checkpoint "
                                 f"{ckpts[c]!r} (columns 'method', 'item', 'checkpoint'); every method needs a "
                                 "confidence for every (evaluation checkpoint, item)")
            stacked.append(conf.reshape(k, n))
        methods[str(m)] = np.stack(stacked)
    return Confidences(items, ckpts, correct, methods)


# ----------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------
def evaluate(conf: Confidences, *, min_contrast: int, n_boot: int, n_boot_ece: int, seed: int,
             bt_methods: Sequence[str] | None = None, clamp: float | None = None,
             bt_max_iter: int | None = None) -> Result:
    """The contrast-set sizes, the metrics of every method (`compute_metrics`; the fitted
    normalisation for `bt_methods`, default every method; `clamp`, `bt_max_iter` as there)
    and their bootstrap replicates."""
    sizes = contrast_size_frame(conf.correct, conf.checkpoints, min_contrast)
    points, reps, pairs = compute_metrics(conf.correct, conf.methods, min_contrast=min_contrast, n_boot=n_boot,
                                          n_boot_ece=n_boot_ece, seed=seed,
                                          bt_methods=list(conf.methods) if bt_methods is None else bt_methods,
                                          clamp=clamp, bt_max_iter=bt_max_iter)
    points["n_seeds"] = points["method"].map({m: c.shape[0] for m, c in conf.methods.items()})
    points["n_items"] = conf.items.size
    points["n_pairs"] = len(pairs)
    return Result(points, reps, sizes, pairs)
