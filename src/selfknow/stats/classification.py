"""Answer-level scores shared by the papers: AUROC, Brier score, binned ECE; and the one-feature
logistic fit that calibrates a score (LCAE's base-LM error probabilities).

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


def logistic_fit(x, y, C: float = 1.0, tol: float = 1e-10, max_iter: int = 100) -> tuple[float, float]:
    """(slope, intercept) of a one-feature logistic regression of 0/1 labels `y` on `x`, with
    the penalty slope² / (2C) and a free intercept (scikit-learn's `LogisticRegression(C=C)`
    objective), by Newton's method with step halving, stopped when the Newton decrement says
    the objective is within `tol` of its minimum or no step lowers it in floating point. The
    objective is strictly convex, but it has no minimum when `y` is all 0 or all 1 (an error)."""
    from scipy.special import expit

    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"logistic_fit: x and y must be 1-d of one length, got {x.shape} and {y.shape}")
    if y.min() == y.max():
        raise ValueError("logistic_fit: the labels are all one class; no finite fit exists")
    X = np.column_stack([x, np.ones_like(x)])
    ridge = np.array([1.0 / C, 0.0])

    def objective(beta):
        z = X @ beta
        return float(np.logaddexp(0.0, z).sum() - y @ z + 0.5 * ridge[0] * beta[0] ** 2)

    beta = np.zeros(2)
    for _ in range(max_iter):
        p = expit(X @ beta)
        grad = X.T @ (p - y) + ridge * beta
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.diag(ridge)
        step = np.linalg.solve(hess, grad)
        if grad @ step / 2 < tol:
            return float(beta[0]), float(beta[1])
        f0, t = objective(beta), 1.0
        while objective(beta - t * step) >= f0:
            t /= 2
            if t < 1e-12:
                return float(beta[0]), float(beta[1])
        beta = beta - t * step
    raise ValueError(f"logistic_fit: Newton's method did not converge in {max_iter} iterations")
