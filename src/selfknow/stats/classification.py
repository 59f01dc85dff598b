"""Answer-level scores shared by the papers: AUROC, Brier score, binned ECE.

Pure numpy; inputs are confidences in [0, 1] and 0/1 correctness labels.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def _as_arrays(conf, correct) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=float)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"confidence and correctness must be 1-D of one length, got {p.shape} and {y.shape}")
    return p, y


def auc(conf, correct) -> float:
    """Area under the ROC curve of `conf` as a score for `correct` (Mann-Whitney U with
    mid-ranks for ties). NaN when only one class is present."""
    p, y = _as_arrays(conf, correct)
    n_pos = y.sum()
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(p)
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def brier(conf, correct) -> float:
    """Mean squared difference between confidence and correctness."""
    p, y = _as_arrays(conf, correct)
    return float(np.mean((p - y) ** 2))


def binned_ece(conf, correct, n_bins: int = 10) -> float:
    """Expected calibration error over `n_bins` equal-width bins of [0, 1]; a confidence of
    exactly 1 falls in the last bin. Weighted by bin size."""
    p, y = _as_arrays(conf, correct)
    if p.size == 0:
        return float("nan")
    idx = np.minimum((p * n_bins).astype(int), n_bins - 1)
    counts = np.bincount(idx, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=p, minlength=n_bins)
    acc_sum = np.bincount(idx, weights=y, minlength=n_bins)
    return float(np.abs(conf_sum - acc_sum).sum() / p.size)
