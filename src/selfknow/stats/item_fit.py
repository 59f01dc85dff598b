"""Rasch fit statistics: infit and outfit mean squares (lcae paper, §IV item fit; SPEC §3).

With p_iq = σ(θ_i − b_q) and standardised residual z = (x − p)/sqrt(p(1 − p)):

* outfit MNSQ (unweighted) = mean of z² over the answered cells of an item (or person);
* infit MNSQ (information weighted) = Σ (x − p)² / Σ p(1 − p) over the same cells.

Both have expectation 1 under the model. Bands (the paper's): 0.5-1.5 acceptable on both,
> 2.0 on either is severe misfit, anything else is marginal.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from selfknow.stats.responses import Responses, sum_cells

ACCEPTABLE = (0.5, 1.5)
SEVERE = 2.0


@dataclass(frozen=True)
class FitStatistics:
    """MNSQ per item and person, and the information Σ p(1 − p) over the same cells (the
    infit denominator; the Fisher information of b, or of θ, with the other side fixed)."""

    infit_item: np.ndarray
    outfit_item: np.ndarray
    infit_person: np.ndarray
    outfit_person: np.ndarray
    information_item: np.ndarray
    information_person: np.ndarray


def fit_statistics(X, theta, b) -> FitStatistics:
    """Infit/outfit MNSQ per item (columns) and per person (rows) of `X` (a dense array with
    NaN = missing, or a sparse :class:`~selfknow.stats.responses.Responses`) given abilities
    `theta` and difficulties `b`. Cells with a non-finite θ or b are skipped; an item or
    person with no usable cell gets NaN.

    Per cell, with e = e^(θ−b), Q = 1 − p = 1/(1 + e) and p = eQ, written so that no
    difference of nearly equal numbers is formed: z² = 1/e if x = 1, e if x = 0;
    (x − p)² = Q² if x = 1, p² if x = 0; p(1 − p) = pQ."""
    R = X if isinstance(X, Responses) else Responses.from_dense(X, "fit statistics matrix")
    th = np.asarray(theta, dtype=float)
    bb = np.asarray(b, dtype=float)
    if R.shape != (th.size, bb.size):
        raise ValueError(f"X has shape {R.shape}, theta {th.shape}, b {bb.shape}")
    ok_r, ok_c = np.isfinite(th), np.isfinite(bb)
    usable = R.take(ok_r, ok_c)
    e_theta = np.exp(np.clip(th[ok_r], -30, 30))
    e_minus_b = np.exp(np.clip(-bb[ok_c], -30, 30))

    def residuals(blk) -> list[np.ndarray]:
        e = blk.per_row(e_theta) * blk.per_col(e_minus_b)
        q = 1.0 / (1.0 + e)
        p = e * q
        return [np.where(blk.x, 1.0 / e, e), np.where(blk.x, q * q, p * p), p * q]

    (z2_r, sq_r, var_r), (z2_c, sq_c, var_c) = sum_cells(usable, residuals, "both")
    n_r, n_c = usable.row_counts, usable.col_counts

    def spread(values: np.ndarray, ok: np.ndarray, n: np.ndarray) -> np.ndarray:
        out = np.full(ok.size, np.nan)
        out[ok] = np.where(n > 0, values, np.nan)
        return out

    with np.errstate(invalid="ignore", divide="ignore"):
        return FitStatistics(
            infit_item=spread(sq_c / var_c, ok_c, n_c),
            outfit_item=spread(z2_c / n_c, ok_c, n_c),
            infit_person=spread(sq_r / var_r, ok_r, n_r),
            outfit_person=spread(z2_r / n_r, ok_r, n_r),
            information_item=spread(var_c, ok_c, n_c),
            information_person=spread(var_r, ok_r, n_r),
        )


def fit_band(infit, outfit) -> np.ndarray:
    """"acceptable" when both MNSQ are in [0.5, 1.5], "severe" when either exceeds 2.0,
    "marginal" otherwise, "" when a statistic is missing (extreme item/person)."""
    i = np.asarray(infit, dtype=float)
    o = np.asarray(outfit, dtype=float)
    lo, hi = ACCEPTABLE
    ok = (i >= lo) & (i <= hi) & (o >= lo) & (o <= hi)
    severe = (i > SEVERE) | (o > SEVERE)
    band = np.where(severe, "severe", np.where(ok, "acceptable", "marginal"))
    return np.where(np.isfinite(i) & np.isfinite(o), band, "").astype(str)


def item_fit_table(fit, item_ids=None):
    """Per-item table of a :class:`~selfknow.stats.rasch.RaschFit`: item, b, se_b, infit,
    outfit, band, status (extreme flag). Returns a pandas DataFrame (pandas imported here so
    the stats package itself imports without it)."""
    import pandas as pd

    ids = list(range(fit.b.size)) if item_ids is None else list(item_ids)
    if len(ids) != fit.b.size:
        raise ValueError(f"{len(ids)} item ids for {fit.b.size} items")
    return pd.DataFrame({
        "item": ids,
        "b": fit.b,
        "se_b": fit.se_b,
        "infit": fit.infit_item,
        "outfit": fit.outfit_item,
        "band": fit_band(fit.infit_item, fit.outfit_item),
        "status": fit.col_status,
    })


def band_counts(infit, outfit) -> dict[str, int]:
    """How many items fall in each band (the paper reports "90 of 100 within 0.5-1.5")."""
    bands = fit_band(infit, outfit)
    return {k: int((bands == k).sum()) for k in ("acceptable", "marginal", "severe")}
