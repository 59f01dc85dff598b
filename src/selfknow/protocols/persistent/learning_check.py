"""Do the trained confidence estimators learn? (`selfknow check-estimators`, issue #46.)

For every trained method (the catalog's methods that need a model: the LoRA variants and
their surrogates and copies, the GCM and its post-hoc map) x dataset x evaluation checkpoint
of a run's main test set (`selfknow export-records`), the cell's confidences are averaged
over training seeds per question and scored against the checkpoint's correctness:

- the full-set AUC of the seed-averaged confidences, with a percentile 95 % interval from
  `n_boot` bootstrap resamples of the questions (seeded);
- the standard deviation of the seed-averaged confidences over the questions.

A cell passes when the interval's lower end is above 0.5 (the estimator ranks right
answers above wrong ones more often than chance, beyond resampling noise) and the sd is at
least `min_sd` (the estimator is not a constant). A cell whose answers are all right or all
wrong has no AUC and fails.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from selfknow.stats.classification import auc

from . import catalog as C

#: the thresholds of issue #46's acceptance
MIN_SD = 0.01
LEVEL = 0.95
COLUMNS = ("dataset", "method", "checkpoint", "n_questions", "n_correct", "n_seeds", "auc", "auc_lo", "auc_hi",
           "sd", "passed")


def trained_methods() -> tuple[str, ...]:
    """The catalog's methods whose confidences come from a trained model."""
    return tuple(m.name for m in C.METHODS if m.needs_model)


def bootstrap_auc(conf, correct, n_boot: int, seed: int, level: float = LEVEL) -> tuple[float, float]:
    """Percentile `level` interval of the AUC over `n_boot` resamples of the questions
    (with replacement, `numpy.random.default_rng(seed)`); resamples with one class only are
    left out. (nan, nan) when none has both classes."""
    aucs = resampled_aucs(conf, correct, resample_indices(np.size(conf), n_boot, seed))
    if np.isnan(aucs).all():
        return float("nan"), float("nan")
    alpha = (1.0 - level) / 2
    lo, hi = np.nanquantile(aucs, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) question indices drawn with replacement (`numpy.random.default_rng(seed)`):
    one set shared by every cell that scores the same questions, so that cells are paired."""
    return np.random.default_rng(seed).integers(0, n, size=(int(n_boot), n))


def resampled_aucs(conf, correct, idx: np.ndarray) -> np.ndarray:
    """The AUC of each resample `idx` (rows of question indices; ties count 1/2), NaN for a
    resample with one class only."""
    p = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=bool)
    ys = y[idx]
    n_pos = ys.sum(axis=1)
    n_neg = p.size - n_pos
    ok = (n_pos > 0) & (n_neg > 0)
    out = np.full(len(idx), np.nan)
    if ok.any():
        ranks = rankdata(p[idx[ok]], axis=1)
        pos, neg = n_pos[ok].astype(float), n_neg[ok].astype(float)
        out[ok] = ((ranks * ys[ok]).sum(axis=1) - pos * (pos + 1) / 2) / (pos * neg)
    return out


def check_estimators(records: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, min_sd: float = MIN_SD,
                     methods: tuple[str, ...] | None = None) -> pd.DataFrame:
    """One row per (dataset, trained method, evaluation checkpoint) of plain `records` (the
    `COLUMNS` above; the rows of `role` "train" are left out). Every cell draws its resamples
    with `seed`, so cells are comparable question for question."""
    methods = trained_methods() if methods is None else methods
    df = records
    if "role" in df.columns:
        df = df[df["role"].fillna("eval").astype(str).str.lower() != "train"]
    df = df[df["method"].isin(methods)]
    if df.empty:
        raise ValueError(f"no evaluation records of a trained method ({', '.join(methods)})")
    df = df.assign(dataset=df["dataset"].fillna("") if "dataset" in df.columns else "",
                   seed=df["seed"] if "seed" in df.columns else 0)
    mixed = df.groupby(["dataset", "checkpoint", "item"])["correct"].nunique()
    if (mixed > 1).any():
        raise ValueError(f"records give one question two correctness labels: {mixed[mixed > 1].index[0]}")
    keys = ["dataset", "method", "checkpoint"]
    rows = []
    for (dataset, method, ckpt), g in df.groupby(keys, sort=False):
        per_q = g.groupby("item").agg(confidence=("confidence", "mean"), correct=("correct", "first"))
        conf = per_q["confidence"].to_numpy(float)
        y = per_q["correct"].to_numpy().astype(bool)
        lo, hi = bootstrap_auc(conf, y, n_boot, seed)
        sd = float(conf.std())
        rows.append({"dataset": dataset, "method": method, "checkpoint": ckpt, "n_questions": int(y.size),
                     "n_correct": int(y.sum()), "n_seeds": int(g["seed"].nunique()), "auc": auc(conf, y),
                     "auc_lo": lo, "auc_hi": hi, "sd": sd, "passed": bool(lo > 0.5 and sd >= min_sd)})
    order = {m: i for i, m in enumerate(methods)}
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out = out.sort_values(["dataset", "method", "checkpoint"], key=lambda s: s.map(order) if s.name == "method" else s,
                          kind="stable")
    return out.reset_index(drop=True)


def summary_line(cells: pd.DataFrame, min_sd: float = MIN_SD) -> str:
    n_pass = int(cells["passed"].sum())
    return (f"{n_pass} of {len(cells)} (method, dataset, checkpoint) cells pass: AUC's {LEVEL:.0%} interval "
            f"above 0.5 and sd of the confidences >= {min_sd}")
