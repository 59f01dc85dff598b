"""Fitted Bradley-Terry normalisation of contrast-set confidences (persistent paper, §B.1).

For a contrast question, checkpoints 1 and 2 give confidences p1, p2 in their own answers and
exactly one is right. The fitted map is r(p1, p2) = σ(h(p1) - h(p2)) = P(checkpoint 1 correct),
with

* h antisymmetric about 0.5: h(1 - p) = -h(p), so h(0.5) = 0 and negating both claims gives
  r(1 - p1, 1 - p2) = 1 - r(p1, p2);
* h piecewise linear on u = max(p, 1 - p) with knots 0.5 = c0 < c1 < ... < cK < 1, c_k the
  k/(K+1) quantile of the 2N values max(p, 1 - p) of the contrast set (K = 30; equal quantiles,
  possible after isotonic calibration, are merged), and beyond cK the slope of the last
  interval;
* h(c1..cK) fitted by maximum likelihood: minimise the mean Bernoulli negative log-likelihood
  of y = 1{checkpoint 1 correct} under r (convex in the knot values), with L-BFGS-B at the
  authors' settings (conset/evaluation.py `_learn_1d_conditioning`: maxiter 500, gtol 1e-9,
  ftol 1e-12; config `persistent.bt_max_iter`). The paper's text says 50 iterations; at 50
  an informative contrast set's fit stops short of the optimum (tests/test_stats_persistent.py).

Like the authors' code we parameterise h by its increments between knots and bound them at 0,
so h is non-decreasing (a higher confidence never lowers the chance of being the correct one);
``monotone=False`` drops the bound. Eq. 1 is the member h = logit, which is also the start.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

N_KNOTS = 30
#: the authors' L-BFGS-B settings (`_learn_1d_conditioning`); the iterations are also the
#: schema default of `persistent.bt_max_iter`
MAX_ITER = 500
GTOL = 1e-9
FTOL = 1e-12


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


@dataclass(frozen=True)
class BTNormaliser:
    """A fitted h: ``knots`` (c0 = 0.5, c1..cK) and ``values`` h(c_k) (values[0] = 0)."""

    knots: np.ndarray
    values: np.ndarray
    n_iter: int = 0
    converged: bool = True

    def h(self, p) -> np.ndarray:
        """h(p): antisymmetric, piecewise linear in max(p, 1 - p), linear beyond the last knot."""
        p = np.asarray(p, dtype=float)
        u = np.maximum(p, 1 - p)
        c, v = self.knots, self.values
        inside = np.interp(u, c, v)
        slope = (v[-1] - v[-2]) / (c[-1] - c[-2])
        hu = np.where(u > c[-1], v[-1] + slope * (u - c[-1]), inside)
        return np.where(p >= 0.5, hu, -hu)

    def prob_first(self, p1, p2) -> np.ndarray:
        """r(p1, p2) = σ(h(p1) - h(p2)): probability that checkpoint 1 is the correct one."""
        return expit(self.h(p1) - self.h(p2))

    def __call__(self, p1, p2) -> tuple[np.ndarray, np.ndarray]:
        """Normalised confidences (r(p1, p2), r(p2, p1)); they sum to 1."""
        z = self.h(p1) - self.h(p2)
        return expit(z), expit(-z)

    def nll(self, p1, p2, y) -> float:
        """Mean negative log-likelihood of y = 1{checkpoint 1 correct}."""
        z = self.h(p1) - self.h(p2)
        y = np.asarray(y, dtype=float)
        return float(np.mean(np.logaddexp(0, z) - y * z))


def _design(p: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """A with h(p) = A @ increments, increments a_j = h(c_j) - h(c_{j-1})."""
    u = np.maximum(p, 1 - p)
    widths = np.diff(knots)
    n_steps = widths.size
    interval = np.clip(np.searchsorted(knots, u, side="right") - 1, 0, n_steps - 1)
    frac = (u - knots[interval]) / widths[interval]  # > 1 only beyond the last knot
    j = np.arange(n_steps)[None, :]
    a = np.where(j < interval[:, None], 1.0, 0.0)
    a[np.arange(u.size), interval] = frac
    return a * np.where(p >= 0.5, 1.0, -1.0)[:, None]


def fit_bt_normaliser(p1, p2, y, *, n_knots: int = N_KNOTS, max_iter: int = MAX_ITER,
                      monotone: bool = True) -> BTNormaliser:
    """Fit the §B.1 map on one contrast set: ``p1``, ``p2`` the two checkpoints' confidences,
    ``y`` = 1 where checkpoint 1 is the correct one."""
    from scipy.optimize import minimize  # heavy; only fitting needs it

    a = np.asarray(p1, dtype=float)
    b = np.asarray(p2, dtype=float)
    t = np.asarray(y, dtype=float)
    if not (a.shape == b.shape == t.shape) or a.ndim != 1 or a.size == 0:
        raise ValueError("p1, p2 and y must be non-empty 1-D arrays of one length")
    for name, p in (("p1", a), ("p2", b)):
        if not np.all((p >= 0) & (p <= 1)):
            raise ValueError(f"{name} must lie in [0, 1]")
    if not np.all((t == 0) | (t == 1)):
        raise ValueError("y must be 0/1")
    upper = np.maximum(np.concatenate([a, b]), 1 - np.concatenate([a, b]))
    levels = np.arange(1, n_knots + 1) / (n_knots + 1)
    # Knots strictly inside (0.5, 1): a knot at 0.5 or 1 would make an empty interval.
    inner = np.unique(np.clip(np.quantile(upper, levels), 0.5 + 1e-6, 1 - 1e-6))
    if inner.size == 0:
        inner = np.array([0.75])  # every p is 0.5: any knot gives h = 0 on the data
    knots = np.concatenate([[0.5], inner])
    design = _design(a, knots) - _design(b, knots)
    start = np.diff(_logit(knots))

    def objective(inc: np.ndarray) -> tuple[float, np.ndarray]:
        z = design @ inc
        loss = np.mean(np.logaddexp(0, z) - t * z)
        grad = design.T @ (expit(z) - t) / t.size
        return float(loss), grad

    bounds = [(0.0, None)] * start.size if monotone else None
    res = minimize(objective, start, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": max_iter, "gtol": GTOL, "ftol": FTOL})
    values = np.concatenate([[0.0], np.cumsum(res.x)])
    return BTNormaliser(knots, values, int(res.nit), bool(res.success))
