"""Isotonic recalibration by pool-adjacent-violators (the persistent paper's post-hoc baseline).

Table 11's "Post-hoc" row: isotonic regression fitted by PAV on the non-oracle checkpoints'
train split (pooled), applied to evaluation confidences with linear interpolation.

Two ways of turning the PAV fit into a function are provided:

* ``"points"`` (default): the fitted value at every distinct training confidence, linear
  interpolation between them, flat beyond the range (scikit-learn's
  ``IsotonicRegression(out_of_bounds="clip")``);
* ``"block_means"``: the authors' code (conset/utils.py ``_pava_knots``): one knot per PAV
  block at the block's mean confidence, plus (0, 0) and (1, 1) anchors when the data do not
  reach 0 or 1, linear interpolation between knots. Values inside a block are thus
  interpolated rather than constant, and the ends run to 0 and 1. (The authors pool raw
  sorted points; here tied confidences are pooled first, which only matters when tied
  confidences carry different labels.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def pav(y, w) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted non-decreasing least-squares fit of the sequence ``y`` (weights ``w``).

    Returns (block values, block weights, block end indices (exclusive)) of the fitted step
    function, in order."""
    vals: list[float] = []
    wts: list[float] = []
    ends: list[int] = []
    for i, (yi, wi) in enumerate(zip(np.asarray(y, dtype=float), np.asarray(w, dtype=float))):
        vals.append(float(yi))
        wts.append(float(wi))
        ends.append(i + 1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            wsum = wts[-2] + wts[-1]
            merged = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / wsum
            vals[-2:] = [merged]
            wts[-2:] = [wsum]
            ends[-2:] = [ends[-1]]
    return np.array(vals), np.array(wts), np.array(ends, dtype=int)


@dataclass(frozen=True)
class IsotonicCalibrator:
    """A fitted monotone map: knots ``x`` (increasing) and values ``y``; piecewise linear,
    flat outside [x[0], x[-1]]."""

    x: np.ndarray
    y: np.ndarray

    def __call__(self, conf) -> np.ndarray:
        return np.interp(np.asarray(conf, dtype=float), self.x, self.y)


def fit_isotonic(conf, correct, weights=None, *, interpolation: str = "points") -> IsotonicCalibrator:
    """Fit P(correct | confidence) as a non-decreasing function by PAV (see module doc for
    ``interpolation``)."""
    x = np.asarray(conf, dtype=float)
    t = np.asarray(correct, dtype=float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    if not (x.shape == t.shape == w.shape) or x.ndim != 1 or x.size == 0:
        raise ValueError("conf, correct and weights must be non-empty 1-D arrays of one length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(t)) and np.all(w > 0)):
        raise ValueError("conf and correct must be finite and weights positive")
    ux, inverse = np.unique(x, return_inverse=True)
    uw = np.bincount(inverse, weights=w)
    uy = np.bincount(inverse, weights=w * t) / uw
    vals, wts, ends = pav(uy, uw)
    if interpolation == "points":
        return IsotonicCalibrator(ux, np.repeat(vals, np.diff(np.concatenate([[0], ends]))))
    if interpolation == "block_means":
        starts = np.concatenate([[0], ends[:-1]])
        kx = np.add.reduceat(ux * uw, starts) / np.add.reduceat(uw, starts)
        ky = vals
        if kx[0] > 0:
            kx, ky = np.concatenate([[0.0], kx]), np.concatenate([[0.0], ky])
        if kx[-1] < 1:
            kx, ky = np.concatenate([kx, [1.0]]), np.concatenate([ky, [1.0]])
        return IsotonicCalibrator(kx, ky)
    raise ValueError(f"interpolation must be 'points' or 'block_means', got {interpolation!r}")
