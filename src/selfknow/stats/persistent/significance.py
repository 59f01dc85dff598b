"""Bold / underline marks for the persistent tables (§A.8).

For one metric column: the best method by point value is bolded (every method within
``tie_tol`` of it too: equal printed values, as the authors' ``_is_best`` with abs_tol 1e-5).
Every other method, a tied one included, is compared with the best (the first on exact
ties) on the paired bootstrap replicates: with d_b = m(best; D^b) - m(method; D^b) (sign
flipped where lower is better), the best is significantly better at the one-sided 95 % level
when the 5 % quantile of d is above 0; a method that is not significantly worse is
underlined. So a method tied with the best is bold and underlined (BEST_TIE), as in the
authors' tables (conset/latex.py: ``_fmt(bold=_is_best(...), underline=row_i in underlines)``,
the underlines from every row but the best's).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .contrast import HIGHER_IS_BETTER

BEST = "best"
TIE = "tie"
BEST_TIE = "best+tie"
#: the marks that print bold / underlined
BOLD = frozenset({BEST, BEST_TIE})
UNDERLINED = frozenset({TIE, BEST_TIE})


def percentile_interval(reps, level: float) -> tuple[float, float]:
    """The two-sided `level` percentile interval of bootstrap replicates (NaNs ignored)."""
    alpha = (1 - level) / 2
    lo, hi = np.nanquantile(np.asarray(reps, dtype=float), [alpha, 1 - alpha])
    return float(lo), float(hi)


def significance_marks(point: Mapping[str, float], replicates: Mapping[str, np.ndarray], *,
                       higher_is_better: bool, level: float = 0.95,
                       tie_tol: float = 1e-5) -> dict[str, str]:
    """Marks per method for one metric: "best" (bold), "tie" (not significantly worse than
    the best: underline), "best+tie" (tied with the best and not significantly worse: both)
    or "" — from point values and paired (B,) replicate arrays."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    finite = {m: float(v) for m, v in point.items() if v is not None and not math.isnan(v)}
    marks = {m: "" for m in point}
    if not finite:
        return marks
    sign = 1.0 if higher_is_better else -1.0
    best = max(finite, key=lambda m: sign * finite[m])  # first best on exact ties
    for m, v in finite.items():
        if abs(v - finite[best]) <= tie_tol:
            marks[m] = BEST
    if best not in replicates:
        raise ValueError(f"no bootstrap replicates for the best method {best!r}")
    ref = np.asarray(replicates[best], dtype=float)
    for m in finite:
        if m == best:
            continue
        if m not in replicates:
            raise ValueError(f"no bootstrap replicates for method {m!r}")
        other = np.asarray(replicates[m], dtype=float)
        if other.shape != ref.shape:
            raise ValueError(f"replicates of {m!r} {other.shape} and {best!r} {ref.shape} are not paired")
        diff = sign * (ref - other)
        diff = diff[np.isfinite(diff)]
        if diff.size == 0:
            continue
        if not np.quantile(diff, 1 - level) > 0:
            marks[m] = BEST_TIE if marks[m] == BEST else TIE
    return marks


def separated_bold(marks: Mapping[str, str], replicates: Mapping[str, np.ndarray] | None,
                   chance: float | None = None, level: float = 0.95) -> dict[str, str]:
    """`significance_marks`' marks with the bold kept only where it says something: on a best
    that its interval separates from every other method (none is underlined: not significantly
    worse, or tied), whose replicates vary (a value every replicate repeats is fixed by
    construction, such as a contrast ECE of 0) and, for a metric with a `chance` value
    (`contrast.CHANCE`), whose two-sided `level` percentile interval excludes it (a best at
    chance is the best of estimators that show nothing). Without replicates nothing is
    separated, so nothing is bold. Underlines are kept."""
    out = dict(marks)
    bests = [m for m, k in marks.items() if k in BOLD]
    others_close = any(k in UNDERLINED for m, k in marks.items() if m not in bests) or len(bests) > 1
    for m in bests:
        reps = None if replicates is None else replicates.get(m)
        finite = None if reps is None else np.asarray(reps, dtype=float)
        fixed = finite is None or not np.isfinite(finite).any() or np.nanmax(finite) == np.nanmin(finite)
        at_chance = False
        if chance is not None and not fixed:
            lo, hi = percentile_interval(finite, level)
            at_chance = lo <= chance <= hi
        if others_close or fixed or at_chance:
            out[m] = TIE if marks[m] == BEST_TIE else ""
    return out


def table_marks(points: Mapping[str, Mapping[str, float]],
                replicates: Mapping[str, Mapping[str, np.ndarray]], *,
                higher_is_better: Mapping[str, bool] = HIGHER_IS_BETTER,
                level: float = 0.95) -> dict[str, dict[str, str]]:
    """Marks for a block of a table: ``points`` method -> metric -> value, ``replicates``
    method -> metric -> (B,) values (``bootstrap_persistent``). Returns method -> metric ->
    mark, for every metric present in ``points``."""
    methods = list(points)
    metrics = list(dict.fromkeys(k for v in points.values() for k in v))
    out: dict[str, dict[str, str]] = {m: {} for m in methods}
    for metric in metrics:
        if metric not in higher_is_better:
            raise ValueError(f"unknown direction for metric {metric!r}")
        col = significance_marks({m: points[m].get(metric, float("nan")) for m in methods},
                                 {m: replicates[m][metric] for m in methods if metric in replicates.get(m, {})},
                                 higher_is_better=higher_is_better[metric], level=level)
        for m in methods:
            out[m][metric] = col[m]
    return out
