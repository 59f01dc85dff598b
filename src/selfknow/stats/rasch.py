"""Rasch (1PL) model: P(X_iq = 1) = σ(θ_i − b_q)  (lcae paper, Stage 1; SPEC §3).

Estimation, as implemented here:

* ``method="jml"`` — joint maximum likelihood. Alternating one-step Newton updates of the person
  and item parameters on the non-extreme submatrix, missing responses simply skipped (they
  contribute no term to the likelihood). JML difficulties are inconsistent for a fixed test
  length; they are multiplied by the Wright & Douglas (1977) factor (L − 1)/L, where L is the
  number of calibrated items (with missing responses: the mean number of calibrated items a
  calibrated person answered).
* ``method="cml"`` — conditional maximum likelihood: the likelihood conditional on each
  person's raw score, which does not involve θ (exact and consistent for b). Elementary
  symmetric functions (ESF) by the summation algorithm, all leave-one-out ESFs at once
  (O(L³) per evaluation, for tests up to roughly a thousand items). Missing responses: persons
  are grouped by their pattern of answered items and each group contributes its own
  conditional likelihood over the items it answered (patterns of equal size are batched;
  the cost grows with the number of distinct patterns, so scattered missingness in a large
  matrix is better served by JML). Optimised with L-BFGS on the analytic gradient.

Scale identification: mean difficulty of the calibrated (non-extreme) items is 0.

Extreme rows and columns: a person (row) with all observed responses correct or all wrong, or
no responses, and an item (column) answered correctly by all or by none of its respondents
carry no information on the logit scale. They are found iteratively (dropping extreme
columns can make rows extreme and vice versa), reported, and left out of the difficulty
calibration. Afterwards:

* abilities of *every* person are estimated from the calibrated items with the difficulties
  fixed (anchored, see :func:`estimate_abilities`), by Warm's weighted likelihood (WLE),
  finite for extreme scores (a person with no answered calibrated item gets NaN);
* an extreme item gets the difficulty that reproduces an adjusted score of 0.3 from its
  extreme (n − 0.3 correct or 0.3 correct), given the abilities — the usual "extreme score
  adjustment" — so that IRT_ModelErrorP is finite for every item; it is flagged.

Standard errors are model-based: 1/sqrt(Fisher information) of each parameter with the others
fixed (for CML the diagonal of the conditional information). Fit statistics: see
:mod:`selfknow.stats.item_fit`.

Missing responses are NaN throughout. Arrays are examinees x items.

Independent references (tests/test_rasch.py): girth's ``rasch_conditional`` is the same CML
(Σb = 0), so CML difficulties are compared with it. girth's ``rasch_jml`` is not the same
estimator: no bias correction, θ and b bounded to [−6, 6], and θ re-standardised to mean 0 /
SD 1 after every sweep (which fixes the θ scale instead of the item mean), so its
difficulties differ by a scale factor; our JML is checked against a direct optimisation of
the joint likelihood instead. girth's ``rasch_mml`` fixes θ ~ N(0, 1) and fits each item to
its prior-integrated proportion correct, an approximation rather than full MML.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from selfknow.stats.item_fit import fit_statistics

EXTREME_SCORE_ADJUSTMENT = 0.3

Method = Literal["jml", "cml"]
AbilityMethod = Literal["wle", "mle"]


# ----------------------------------------------------------------------------- input checks

def as_response_matrix(X, name: str = "response matrix") -> np.ndarray:
    """`X` as a 2-D float array of 0/1 with NaN for missing; raises naming the first bad cell."""
    A = np.asarray(X, dtype=float)
    if A.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D examinees x items array, got shape {A.shape}")
    bad = (A != 0) & (A != 1) & ~np.isnan(A)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"{name}: row {i}, column {j} holds {A[i, j]!r}; responses must be 0, 1 or NaN")
    return A


@dataclass(frozen=True)
class Extremes:
    """Outcome of the iterative search for extreme rows and columns.

    ``row_status`` / ``col_status`` are "" for calibrated rows/columns, otherwise
    "all_correct", "all_wrong" or "no_responses" (judged on the rows/columns still in play
    when it became extreme)."""

    row_status: np.ndarray
    col_status: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        return self.row_status != ""

    @property
    def cols(self) -> np.ndarray:
        return self.col_status != ""


def find_extremes(X) -> Extremes:
    """Iteratively flag rows and columns with an all-correct, all-wrong or empty response
    vector, removing the flagged ones before looking again, until nothing changes."""
    X = as_response_matrix(X)
    return _find_extremes(*_prepare(X))


def _find_extremes(Xz: np.ndarray, mask: np.ndarray | None) -> Extremes:
    n_r, n_c = Xz.shape
    row_status = np.full(n_r, "", dtype=object)
    col_status = np.full(n_c, "", dtype=object)
    while True:
        rk = (row_status == "").astype(float)
        ck = (col_status == "").astype(float)
        rs, cs = Xz @ ck, rk @ Xz
        rn, cn = (np.full(n_r, ck.sum()), np.full(n_c, rk.sum())) if mask is None else (mask @ ck, rk @ mask)
        new_r = np.where(row_status == "", _status(rn, rs), "")
        new_c = np.where(col_status == "", _status(cn, cs), "")
        if not (new_r != "").any() and not (new_c != "").any():
            break
        row_status = np.where(new_r != "", new_r, row_status)
        col_status = np.where(new_c != "", new_c, col_status)
    return Extremes(row_status.astype(str), col_status.astype(str))


def _status(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    out = np.full(n.shape, "", dtype=object)
    out[(s == n) & (n > 0)] = "all_correct"
    out[(s == 0) & (n > 0)] = "all_wrong"
    out[n == 0] = "no_responses"
    return out


# ----------------------------------------------------------------------------- result

@dataclass(frozen=True)
class RaschFit:
    """A fitted Rasch model. Person arrays have one entry per row of the input matrix, item
    arrays one per column (extreme ones included, flagged in ``row_status``/``col_status``)."""

    method: str
    theta: np.ndarray
    se_theta: np.ndarray
    b: np.ndarray
    se_b: np.ndarray
    row_status: np.ndarray
    col_status: np.ndarray
    infit_item: np.ndarray
    outfit_item: np.ndarray
    infit_person: np.ndarray
    outfit_person: np.ndarray
    converged: bool
    n_iter: int
    bias_correction: float = 1.0
    ability_method: str = "wle"
    notes: dict = field(default_factory=dict)

    @property
    def extreme_rows(self) -> np.ndarray:
        """Indices of extreme (or empty) rows."""
        return np.flatnonzero(self.row_status != "")

    @property
    def extreme_cols(self) -> np.ndarray:
        """Indices of extreme (or empty) columns."""
        return np.flatnonzero(self.col_status != "")


# ----------------------------------------------------------------------------- fitting

class _Grid:
    """Q = 1 − σ(θ_i − b_q) on a reused buffer, zero on missing cells, with its row/column
    power sums. Large matrices spend their time here, so each call makes one buffer pass
    (outer product of exp's, +1, reciprocal) and the sums run through BLAS/einsum."""

    def __init__(self, shape: tuple[int, int], mask: np.ndarray | None):
        self.buf = np.empty(shape)
        self.mask = mask  # float 0/1 or None for a complete matrix
        self.ones_r = np.ones(shape[0])
        self.ones_c = np.ones(shape[1])

    def q(self, theta: np.ndarray, b: np.ndarray) -> np.ndarray:
        np.multiply.outer(np.exp(np.clip(theta, -30, 30)), np.exp(np.clip(-b, -30, 30)), out=self.buf)
        self.buf += 1.0
        np.reciprocal(self.buf, out=self.buf)
        if self.mask is not None:
            self.buf *= self.mask
        return self.buf

    def sums(self, Q: np.ndarray, axis: int, power: int) -> list[np.ndarray]:
        """[Σ Q, Σ Q², Σ Q³][:power] along `axis`."""
        idx = "ij->i" if axis == 1 else "ij->j"
        out = [Q @ self.ones_c if axis == 1 else self.ones_r @ Q]
        if power >= 2:
            out.append(np.einsum("ij,ij" + idx[2:], Q, Q))
        if power >= 3:
            out.append(np.einsum("ij,ij,ij" + idx[2:], Q, Q, Q))
        return out


def _prepare(X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(X with NaN → 0, float mask of answered cells or None when nothing is missing)."""
    obs = ~np.isnan(X)
    if obs.all():
        return X, None
    return np.where(obs, X, 0.0), obs.astype(float)


def fit_rasch(
    X,
    method: Method = "jml",
    *,
    bias_correction: bool = True,
    ability_method: AbilityMethod = "wle",
    tol: float = 1e-6,
    max_iter: int = 500,
) -> RaschFit:
    """Fit the Rasch model to an examinees x items 0/1 matrix (NaN = missing).

    Difficulties are calibrated on the non-extreme submatrix by JML (with the (L−1)/L
    correction unless ``bias_correction=False``) or CML, centred to mean 0; abilities of all
    persons are then re-estimated with the difficulties fixed (WLE by default); extreme items
    get extreme-score-adjusted difficulties. See the module docstring for the details.
    """
    if method not in ("jml", "cml"):
        raise ValueError(f"method must be 'jml' or 'cml', got {method!r}")
    X = as_response_matrix(X)
    ext = _find_extremes(*_prepare(X))
    rows, cols = ~ext.rows, ~ext.cols
    if rows.sum() < 2 or cols.sum() < 2:
        raise ValueError(
            f"response matrix {X.shape}: only {int(rows.sum())} non-extreme rows and "
            f"{int(cols.sum())} non-extreme columns; a Rasch calibration needs at least 2 of each")
    trimmed = not (rows.all() and cols.all())
    sub = X[np.ix_(rows, cols)] if trimmed else X
    factor = 1.0
    theta_start = None
    if method == "jml":
        b_sub, theta_sub, converged, n_iter = _jml(sub, tol=tol, max_iter=max_iter)
        if bias_correction:
            n_per_person = float(np.mean((~np.isnan(sub)).sum(axis=1)))
            factor = (n_per_person - 1.0) / n_per_person
            b_sub = b_sub * factor
        theta_start = np.zeros(X.shape[0])
        theta_start[rows] = theta_sub * factor
    else:
        b_sub, converged, n_iter = _cml(sub, tol=tol, max_iter=max_iter)

    b = np.full(X.shape[1], np.nan)
    b[cols] = b_sub
    # Abilities from the calibrated items only: an extreme item carries no information on
    # where a person sits relative to the others.
    X_cols = X[:, cols] if trimmed else X
    if ability_method not in ("wle", "mle"):
        raise ValueError(f"ability method must be 'wle' or 'mle', got {ability_method!r}")
    theta, se_theta = _abilities(*_prepare(X_cols), b_sub, ability_method, theta_start, 1e-8, 200)
    se_b = np.full(X.shape[1], np.nan)
    se_b[cols] = _item_se(sub, theta[rows], b_sub) if method == "jml" else _cml_se(sub, b_sub)
    if ext.cols.any():
        b_ext, se_ext = _adjusted_item_difficulty(X[:, ext.cols], theta)
        b[ext.cols], se_b[ext.cols] = b_ext, se_ext

    fit = fit_statistics(sub, theta[rows], b_sub)
    infit_i = np.full(X.shape[1], np.nan)
    outfit_i = np.full(X.shape[1], np.nan)
    infit_p = np.full(X.shape[0], np.nan)
    outfit_p = np.full(X.shape[0], np.nan)
    infit_i[cols], outfit_i[cols] = fit.infit_item, fit.outfit_item
    infit_p[rows], outfit_p[rows] = fit.infit_person, fit.outfit_person
    return RaschFit(
        method=method, theta=theta, se_theta=se_theta, b=b, se_b=se_b,
        row_status=ext.row_status, col_status=ext.col_status,
        infit_item=infit_i, outfit_item=outfit_i, infit_person=infit_p, outfit_person=outfit_p,
        converged=bool(converged), n_iter=int(n_iter), bias_correction=float(factor),
        ability_method=ability_method,
        notes={"n_calibrated_rows": int(rows.sum()), "n_calibrated_cols": int(cols.sum()),
               "missing_fraction": float(np.isnan(X).mean())},
    )


def _expit(x: np.ndarray) -> np.ndarray:
    """σ(x) without overflow (numpy only, so the module imports without scipy.special)."""
    return np.exp(-np.logaddexp(0.0, -x))


def _logistic_grid(theta: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P = σ(θ_i − b_q) as a new array (small matrices; the fitting loops use _Grid)."""
    return _expit(np.asarray(theta, dtype=float)[:, None] - np.asarray(b, dtype=float)[None, :])


def _jml(X: np.ndarray, tol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray, bool, int]:
    """Unconditional (joint) ML on a matrix without extreme rows/columns: alternating Newton
    steps for θ (b fixed) and b (θ fixed), b re-centred after each sweep. Returns centred b
    (uncorrected), θ, converged, sweeps."""
    Xz, mask = _prepare(X)
    grid = _Grid(X.shape, mask)
    rs, cs = Xz.sum(axis=1), Xz.sum(axis=0)
    if mask is None:
        rn, cn = np.full(X.shape[0], float(X.shape[1])), np.full(X.shape[1], float(X.shape[0]))
    else:
        rn, cn = mask.sum(axis=1), mask.sum(axis=0)
    theta = np.log(rs / (rn - rs))
    b = -np.log(cs / (cn - cs))
    b -= b.mean()
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        # Σ_q P = n − Σ Q and Σ_q P(1−P) = Σ Q − Σ Q² over answered cells
        q1, q2 = grid.sums(grid.q(theta, b), axis=1, power=2)
        d_theta = np.clip((rs - (rn - q1)) / (q1 - q2), -1.0, 1.0)
        theta = theta + d_theta
        q1, q2 = grid.sums(grid.q(theta, b), axis=0, power=2)
        d_b = np.clip(-(cs - (cn - q1)) / (q1 - q2), -1.0, 1.0)
        b = b + d_b
        shift = b.mean()
        b -= shift
        theta -= shift
        if max(np.abs(d_theta).max(), np.abs(d_b).max()) < tol:
            converged = True
            break
    return b, theta, converged, it


def _item_se(X: np.ndarray, theta: np.ndarray, b: np.ndarray) -> np.ndarray:
    _, mask = _prepare(X)
    grid = _Grid(X.shape, mask)
    q1, q2 = grid.sums(grid.q(theta, b), axis=0, power=2)
    return 1.0 / np.sqrt(q1 - q2)


# ----------------------------------------------------------------------------- CML

def _esf_leave_one_out(eps: np.ndarray) -> np.ndarray:
    """G[..., i, r] = γ_r(ε without item i), r = 0..L−1, for a batch of ε vectors (..., L).
    Each row is scaled by a positive constant of its own (only ratios within a row are
    used). Summation algorithm, all rows and the whole batch at once."""
    L = eps.shape[-1]
    G = np.zeros(eps.shape[:-1] + (L, L))
    G[..., 0] = 1.0
    for j in range(L):
        e = np.repeat(eps[..., j:j + 1], L, axis=-1)
        e[..., j] = 0.0
        top = min(j + 1, L - 1)
        G[..., 1:top + 1] += e[..., None] * G[..., 0:top]
        if j % 32 == 31:
            G /= G.max(axis=-1, keepdims=True)
    return G


def _cml_pi(eps: np.ndarray) -> np.ndarray:
    """π[..., i, r] = P(x_i = 1 | raw score r) = ε_i γ_{r−1}^{(i)} / γ_r for r = 0..L."""
    L = eps.shape[-1]
    G = _esf_leave_one_out(eps)
    pad = np.zeros(G.shape[:-1] + (1,))
    num = eps[..., None] * np.concatenate([pad, G], axis=-1)  # ε_i γ_{r−1}^{(i)}
    den = np.concatenate([G, pad], axis=-1) + num             # γ_r^{(i)} + ε_i γ_{r−1}^{(i)}
    with np.errstate(invalid="ignore", divide="ignore"):
        pi = num / den
    if not np.isfinite(pi[..., 1:L]).all():
        raise FloatingPointError(f"CML: elementary symmetric functions out of range for {L} items")
    return pi


def _log_gamma(eps: np.ndarray) -> np.ndarray:
    """log γ_r(ε), r = 0..L, for a batch of ε vectors (..., L); scaled summation algorithm
    (one scale per vector, tracked in logs), −inf where an order underflows."""
    L = eps.shape[-1]
    g = np.zeros(eps.shape[:-1] + (L + 1,))
    g[..., 0] = 1.0
    log_scale = np.zeros(eps.shape[:-1] + (1,))
    for j in range(L):
        g[..., 1:j + 2] += eps[..., j:j + 1] * g[..., 0:j + 1]
        m = g.max(axis=-1, keepdims=True)
        g /= m
        log_scale += np.log(m)
    with np.errstate(divide="ignore"):
        return np.log(g) + log_scale


@dataclass(frozen=True)
class _Bucket:
    """Persons sharing one missingness pattern, stacked with the other patterns of the same
    size: item indices (G, k), persons per raw score (G, k+1), item totals (G, k)."""

    items: np.ndarray
    n_r: np.ndarray
    s: np.ndarray


def _cml_buckets(X: np.ndarray) -> list[_Bucket]:
    obs = ~np.isnan(X)
    patterns, inverse = np.unique(obs, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    by_size: dict[int, list] = {}
    for g, pat in enumerate(patterns):
        items = np.flatnonzero(pat)
        if items.size < 2:
            continue
        Xg = X[inverse == g][:, items]
        r = Xg.sum(axis=1).astype(int)
        keep = (r > 0) & (r < items.size)
        if not keep.any():
            continue
        n_r = np.bincount(r[keep], minlength=items.size + 1).astype(float)
        by_size.setdefault(items.size, []).append((items, n_r, Xg[keep].sum(axis=0)))
    return [_Bucket(*(np.stack(col) for col in zip(*groups))) for groups in by_size.values()]


def _bucket_eps(bucket: _Bucket, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    bg = b[bucket.items]
    bg = bg - bg.mean(axis=-1, keepdims=True)  # the conditional likelihood is shift-invariant
    return bg, np.exp(-bg)


def _cml(X: np.ndarray, tol: float, max_iter: int) -> tuple[np.ndarray, bool, int]:
    L = X.shape[1]
    buckets = _cml_buckets(X)
    if not buckets:
        raise ValueError("CML: no person has a non-extreme score on two or more items")

    def negloglik_grad(b: np.ndarray) -> tuple[float, np.ndarray]:
        # −log L_c = Σ_persons [Σ_i x_i b_i + log γ_r(ε)];  ∂/∂b_i = s_i − Σ_r n_r π_{i|r}
        f, g = 0.0, np.zeros(L)
        for bk in buckets:
            bg, eps = _bucket_eps(bk, b)
            pi = _cml_pi(eps)
            np.add.at(g, bk.items, bk.s - np.einsum("gir,gr->gi", pi, bk.n_r))
            lg = _log_gamma(eps)
            used = bk.n_r > 0
            f += float((bk.s * bg).sum() + (bk.n_r[used] * lg[used]).sum())
        mean = b.mean()
        return f + 0.5 * L * mean**2, g + mean

    from scipy.optimize import minimize  # only CML needs it; keeps the module import light

    cs, cn = np.nansum(X, axis=0), np.sum(~np.isnan(X), axis=0)
    b0 = -np.log(cs / (cn - cs))
    b0 -= b0.mean()
    res = minimize(negloglik_grad, b0, jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": tol, "ftol": 1e-15, "maxcor": 30})
    if not np.isfinite(res.fun):
        raise FloatingPointError(f"CML: elementary symmetric functions underflow for {L} items")
    b = res.x - res.x.mean()
    return b, bool(res.success or np.abs(res.jac).max() < 10 * tol), int(res.nit)


def _cml_se(X: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1/sqrt of the diagonal of the conditional information Σ_r n_r π_{i|r}(1 − π_{i|r})."""
    info = np.zeros(b.size)
    for bk in _cml_buckets(X):
        pi = _cml_pi(_bucket_eps(bk, b)[1])
        np.add.at(info, bk.items, np.einsum("gir,gr->gi", pi * (1.0 - pi), bk.n_r))
    with np.errstate(divide="ignore"):
        return 1.0 / np.sqrt(info)


# ----------------------------------------------------------------------------- anchored

def estimate_abilities(
    X,
    b_fixed,
    method: AbilityMethod = "wle",
    *,
    theta_start=None,
    tol: float = 1e-8,
    max_iter: int = 200,
) -> tuple[np.ndarray, np.ndarray]:
    """Abilities with item difficulties fixed ("anchored"), one per row of `X`.

    ``method="wle"``: Warm's (1989) weighted likelihood estimate, the root of
    Σ_q (x_q − p_q) + J/(2I) = 0 with I = Σ p(1−p), J = Σ p(1−p)(1−2p) over answered items;
    finite for all-correct and all-wrong rows.
    ``method="mle"``: maximum likelihood; an extreme raw score is moved 0.3 from its extreme
    first (documented adjustment) so the estimate is finite.
    Rows with no responses get NaN. Standard error: 1/sqrt(I(θ̂)).
    Used for the lcae paper's Stage 3 (θ re-estimated from final answers, b from Stage 1).
    """
    X = as_response_matrix(X, "ability matrix")
    b = np.asarray(b_fixed, dtype=float)
    if b.shape != (X.shape[1],) or not np.isfinite(b).all():
        raise ValueError(f"b_fixed must be {X.shape[1]} finite difficulties, got shape {b.shape}")
    if method not in ("wle", "mle"):
        raise ValueError(f"ability method must be 'wle' or 'mle', got {method!r}")
    return _abilities(*_prepare(X), b, method, theta_start, tol, max_iter)


def _abilities(Xz: np.ndarray, mask: np.ndarray | None, b: np.ndarray, method: str,
               theta_start, tol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    X = Xz
    n = np.full(X.shape[0], float(X.shape[1])) if mask is None else mask.sum(axis=1)
    score = Xz.sum(axis=1)
    if method == "mle":
        a = EXTREME_SCORE_ADJUSTMENT
        score = np.where(score == 0, a, np.where(score == n, n - a, score))
    empty = n == 0
    if theta_start is None:
        theta = np.log((score + 0.5) / (n - score + 0.5))
        theta += b.mean() if mask is None else (mask @ b) / np.maximum(n, 1)
    else:
        theta = np.asarray(theta_start, dtype=float).copy()
    grid = _Grid(X.shape, mask)
    for _ in range(max_iter):
        sums = grid.sums(grid.q(theta, b), axis=1, power=3 if method == "wle" else 2)
        info = np.maximum(sums[0] - sums[1], 1e-300)
        g = score - (n - sums[0])
        if method == "wle":
            # J = Σ P(1−P)(1−2P) = Σ (−2Q³ + 3Q² − Q) with Q = 1 − P
            g = g + (-2.0 * sums[2] + 3.0 * sums[1] - sums[0]) / (2.0 * info)
        step = np.clip(g / info, -1.0, 1.0)
        step[empty] = 0.0
        theta = theta + step
        if np.abs(step).max() < tol:
            break
    q1, q2 = grid.sums(grid.q(theta, b), axis=1, power=2)
    with np.errstate(divide="ignore"):
        se = 1.0 / np.sqrt(q1 - q2)
    theta[empty] = np.nan
    se[empty] = np.nan
    return theta, se


def _adjusted_item_difficulty(Xc: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Difficulty of extreme columns given abilities: the b at which the expected score of
    the column's respondents is 0.3 from its extreme."""
    O = ~np.isnan(Xc) & np.isfinite(theta)[:, None]
    Of = O.astype(float)
    n = Of.sum(axis=0)
    s = np.nansum(np.where(O, Xc, 0.0), axis=0)
    a = EXTREME_SCORE_ADJUSTMENT
    target = np.where(s == 0, a, np.where(s == n, n - a, s))
    th = np.where(np.isfinite(theta), theta, 0.0)
    b = (Of.T @ th) / np.maximum(n, 1) - np.log(target / np.maximum(n - target, 1e-12))
    for _ in range(200):
        P = _logistic_grid(th, b) * Of
        W = (P * (1.0 - P)).sum(axis=0)
        step = np.clip(-(target - P.sum(axis=0)) / np.maximum(W, 1e-300), -1.0, 1.0)
        step[n == 0] = 0.0
        b = b + step
        if np.abs(step).max() < 1e-8:
            break
    P = _logistic_grid(th, b) * Of
    with np.errstate(divide="ignore"):
        se = 1.0 / np.sqrt((P * (1.0 - P)).sum(axis=0))
    b[n == 0] = np.nan
    se[n == 0] = np.nan
    return b, se


# ----------------------------------------------------------------------------- error probs

def irt_model_error_p(theta, b) -> np.ndarray:
    """IRT_ModelErrorP(i, q) = 1 − σ(θ_i − b_q): examinees x items (lcae paper, §III Stage 1)."""
    th = np.asarray(theta, dtype=float)
    bb = np.asarray(b, dtype=float)
    return _expit(bb[None, :] - th[:, None])


def irt_item_error_p(theta, b) -> np.ndarray:
    """IRT_ItemErrorP(q) = mean over examinees of 1 − σ(θ_i − b_q) (lcae paper, §III Stage 1);
    examinees with NaN ability are left out."""
    th = np.asarray(theta, dtype=float)
    return irt_model_error_p(th[np.isfinite(th)], b).mean(axis=0)


# ----------------------------------------------------------------------------- long -> wide

def response_matrix(
    examinee: Sequence,
    item: Sequence,
    correct: Sequence,
    *,
    rule: Literal["first", "majority"] = "first",
    common_items: bool = True,
) -> tuple[np.ndarray, list, list]:
    """Examinee x item 0/1 matrix from long records (one row per exposure, in the order they
    happened). An item seen several times by one examinee becomes one response:
    ``rule="first"`` keeps the first exposure; ``rule="majority"`` the majority outcome
    (a tie goes to the first exposure). ``common_items=True`` keeps only items every
    examinee saw; otherwise unseen cells are NaN. Returns (matrix, examinee ids, item ids),
    ids sorted."""
    ex = np.asarray(examinee, dtype=object)
    it = np.asarray(item, dtype=object)
    y = np.asarray(correct, dtype=float)
    if not (ex.shape == it.shape == y.shape) or ex.ndim != 1:
        raise ValueError("examinee, item and correct must be 1-D of one length")
    if rule not in ("first", "majority"):
        raise ValueError(f"rule must be 'first' or 'majority', got {rule!r}")
    ex_ids = sorted(set(ex.tolist()))
    it_ids = sorted(set(it.tolist()))
    ei = np.searchsorted(np.array(ex_ids, dtype=object), ex)
    ii = np.searchsorted(np.array(it_ids, dtype=object), it)
    shape = (len(ex_ids), len(it_ids))
    flat = ei * shape[1] + ii
    # first exposure per cell: np.unique returns the first index of each value
    cells, first_idx = np.unique(flat, return_index=True)
    M = np.full(shape, np.nan)
    M.flat[cells] = y[first_idx]
    if rule == "majority":
        n = np.bincount(flat, minlength=M.size).reshape(shape)
        k = np.bincount(flat, weights=y, minlength=M.size).reshape(shape)
        seen = n > 0
        M = np.where(seen & (2 * k > n), 1.0, np.where(seen & (2 * k < n), 0.0, M))
    if common_items:
        keep = ~np.isnan(M).any(axis=0)
        M = M[:, keep]
        it_ids = [i for i, k in zip(it_ids, keep) if k]
    return M, ex_ids, it_ids
