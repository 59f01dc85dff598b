"""Tests across prompting conditions (lcae paper, §IV; SPEC §3 Statistics).

* Friedman test across conditions, blocks = examinees (models): scipy.stats.friedmanchisquare.
* Pairwise Wilcoxon signed-rank tests (two-sided, scipy's default zero handling "wilcox":
  zero differences dropped) with Holm-Bonferroni adjustment (statsmodels multipletests).
* Mean over repeats with a two-sided Student-t interval: mean ± t_{(1+level)/2, n−1} s/√n.

Tables are examinee x condition arrays; a block with a NaN in any condition is dropped from
the Friedman test, and from each pairwise test only the blocks missing one of the pair.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class FriedmanResult:
    statistic: float
    pvalue: float
    df: int
    n_blocks: int


def _table(table) -> np.ndarray:
    T = np.asarray(table, dtype=float)
    if T.ndim != 2 or T.shape[1] < 2:
        raise ValueError(f"expected an examinee x condition table with >= 2 conditions, got {T.shape}")
    return T


def friedman(table) -> FriedmanResult:
    """Friedman χ² across the columns (conditions) of an examinee x condition table."""
    T = _table(table)
    T = T[~np.isnan(T).any(axis=1)]
    if T.shape[0] < 2 or T.shape[1] < 3:
        raise ValueError(f"Friedman needs >= 3 conditions and >= 2 complete blocks, got {T.shape}")
    res = stats.friedmanchisquare(*T.T)
    return FriedmanResult(float(res.statistic), float(res.pvalue), T.shape[1] - 1, T.shape[0])


def pairwise_wilcoxon_holm(table, labels: Sequence[str] | None = None, alpha: float = 0.05) -> list[dict]:
    """Wilcoxon signed-rank test for every pair of conditions, Holm-adjusted over the pairs.

    Returns one dict per pair: a, b, n (blocks used), statistic, p, p_holm, reject (at
    `alpha`), median_diff (a − b). A pair whose differences are all zero gets p = 1."""
    from statsmodels.stats.multitest import multipletests

    T = _table(table)
    labels = [str(i) for i in range(T.shape[1])] if labels is None else list(labels)
    if len(labels) != T.shape[1]:
        raise ValueError(f"{len(labels)} labels for {T.shape[1]} conditions")
    out = []
    for i, j in combinations(range(T.shape[1]), 2):
        ok = ~(np.isnan(T[:, i]) | np.isnan(T[:, j]))
        d = T[ok, i] - T[ok, j]
        if ok.sum() == 0:
            raise ValueError(f"conditions {labels[i]!r} and {labels[j]!r} share no complete block")
        if np.all(d == 0):
            stat, p = 0.0, 1.0
        else:
            res = stats.wilcoxon(T[ok, i], T[ok, j])
            stat, p = float(res.statistic), float(res.pvalue)
        out.append({"a": labels[i], "b": labels[j], "n": int(ok.sum()), "statistic": stat,
                    "p": p, "median_diff": float(np.median(d))})
    reject, p_adj, _, _ = multipletests([r["p"] for r in out], alpha=alpha, method="holm")
    for r, rej, pa in zip(out, reject, p_adj):
        r["p_holm"], r["reject"] = float(pa), bool(rej)
    return out


def mean_ci(repeats, level: float = 0.95, axis: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lower, upper) along `axis` with the Student-t interval
    mean ± t_{(1+level)/2, n−1} · s / √n (s the sample SD, ddof=1). NaNs are ignored;
    fewer than 2 values give NaN bounds."""
    A = np.asarray(repeats, dtype=float)
    n = np.sum(~np.isnan(A), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = np.nanmean(A, axis=axis) if A.size else np.nan
        s = np.nanstd(A, axis=axis, ddof=1) if A.size else np.nan
        t = stats.t.ppf((1.0 + level) / 2.0, np.where(n > 1, n - 1, np.nan))
        half = t * s / np.sqrt(n)
    return m, m - half, m + half
