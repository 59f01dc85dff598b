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

ACCEPTABLE = (0.5, 1.5)
SEVERE = 2.0


@dataclass(frozen=True)
class FitStatistics:
    infit_item: np.ndarray
    outfit_item: np.ndarray
    infit_person: np.ndarray
    outfit_person: np.ndarray


def fit_statistics(X, theta, b) -> FitStatistics:
    """Infit/outfit MNSQ per item (columns) and per person (rows) of `X` (NaN = missing)
    given abilities `theta` and difficulties `b`. Cells with a non-finite θ or b are skipped;
    an item or person with no usable cell gets NaN.

    Computed without forming z²: for a 0/1 response z² = x·e^(b−θ) + (1−x)·e^(θ−b), so the
    outfit sums are matrix-vector products, and with Q = 1 − p the infit numerator is
    Σ (1−x)(1 − 2Q) + Σ Q² and its denominator Σ Q − Σ Q²."""
    X = np.asarray(X, dtype=float)
    th = np.asarray(theta, dtype=float)
    bb = np.asarray(b, dtype=float)
    if X.shape != (th.size, bb.size):
        raise ValueError(f"X has shape {X.shape}, theta {th.shape}, b {bb.shape}")
    ok_r, ok_c = np.isfinite(th), np.isfinite(bb)
    th = np.clip(np.where(ok_r, th, 0.0), -30, 30)
    bb = np.clip(np.where(ok_c, bb, 0.0), -30, 30)
    obs = ~np.isnan(X)
    if obs.all():
        O = np.outer(ok_r, ok_c).astype(float) if not (ok_r.all() and ok_c.all()) else None
    else:
        O = (obs & ok_r[:, None] & ok_c[None, :]).astype(float)
    Xz = np.where(obs, X, 0.0) if O is not None else X
    if O is not None:
        Xz = Xz * O
    Wrong = (O if O is not None else 1.0) - Xz  # 1 − x on usable cells, 0 elsewhere
    e_th, e_b = np.exp(th), np.exp(bb)
    z2_rows = (Xz @ e_b) / e_th + (Wrong @ (1.0 / e_b)) * e_th
    z2_cols = ((1.0 / e_th) @ Xz) * e_b + (e_th @ Wrong) / e_b
    Q = np.multiply.outer(e_th, 1.0 / e_b)
    Q += 1.0
    np.reciprocal(Q, out=Q)
    if O is not None:
        Q *= O
    QQ_r, QQ_c = np.einsum("ij,ij->i", Q, Q), np.einsum("ij,ij->j", Q, Q)
    WQ_r, WQ_c = np.einsum("ij,ij->i", Wrong, Q), np.einsum("ij,ij->j", Wrong, Q)
    Q_r, Q_c = Q.sum(axis=1), Q.sum(axis=0)
    W_r, W_c = Wrong.sum(axis=1), Wrong.sum(axis=0)
    n_r = O.sum(axis=1) if O is not None else np.full(X.shape[0], float(X.shape[1]))
    n_c = O.sum(axis=0) if O is not None else np.full(X.shape[1], float(X.shape[0]))
    with np.errstate(invalid="ignore", divide="ignore"):
        return FitStatistics(
            infit_item=np.where(n_c > 0, (W_c - 2 * WQ_c + QQ_c) / (Q_c - QQ_c), np.nan),
            outfit_item=np.where(n_c > 0, z2_cols / n_c, np.nan),
            infit_person=np.where(n_r > 0, (W_r - 2 * WQ_r + QQ_r) / (Q_r - QQ_r), np.nan),
            outfit_person=np.where(n_r > 0, z2_rows / n_r, np.nan),
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
