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

Input: an examinees x items array with NaN for missing, or a sparse
:class:`~selfknow.stats.responses.Responses`. JML, the abilities and the fit statistics run on
the answered cells only, a block at a time (:func:`~selfknow.stats.responses.sum_cells`), so
time and memory grow with the answered cells; CML works on the dense calibration matrix.

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
from typing import Callable, Literal, Sequence

import numpy as np

from selfknow.stats.item_fit import fit_statistics
from selfknow.stats.responses import Block, Responses, as_response_matrix, sum_cells

__all__ = ["Extremes", "RaschFit", "Responses", "as_response_matrix", "estimate_abilities", "find_extremes",
           "fit_rasch", "irt_item_error_p", "irt_model_error_p", "response_matrix"]

EXTREME_SCORE_ADJUSTMENT = 0.3

Method = Literal["jml", "cml"]
AbilityMethod = Literal["wle", "mle"]
Progress = Callable[[str], None]


# ----------------------------------------------------------------------------- input checks

def _as_responses(X, name: str = "response matrix") -> Responses:
    """A :class:`Responses` as it is, anything else validated as a dense 0/1/NaN matrix."""
    return X if isinstance(X, Responses) else Responses.from_dense(X, name)


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
    return _find_extremes(_as_responses(X))


def _find_extremes(R: Responses) -> Extremes:
    n_r, n_c = R.shape
    row_status = np.full(n_r, "", dtype=object)
    col_status = np.full(n_c, "", dtype=object)
    while True:
        rk, ck = row_status == "", col_status == ""

        def counts(blk: Block) -> list[np.ndarray]:
            in_play = (blk.per_row(rk) & blk.per_col(ck)).astype(float)
            return [in_play, in_play * blk.x]

        if rk.all() and ck.all():
            rn, rs, cn, cs = R.margins
        else:
            (rn, rs), (cn, cs) = sum_cells(R, counts, "both")
        new_r = np.where(rk, _status(rn, rs), "")
        new_c = np.where(ck, _status(cn, cs), "")
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

def _q_sums(R: Responses, theta: np.ndarray, b: np.ndarray, by: Literal["row", "col"],
            power: int) -> list[np.ndarray]:
    """[Σ Q, Σ Q², Σ Q³][:power] per row or per column over the answered cells, with
    Q = 1 − σ(θ_i − b_q) = 1 / (1 + e^θ_i e^−b_q). Large matrices spend their time here:
    per cell two look-ups into small tables of exponentials, a multiply and a reciprocal."""
    e_theta = np.exp(np.clip(theta, -30, 30))
    e_minus_b = np.exp(np.clip(-b, -30, 30))

    def q_powers(blk: Block) -> list[np.ndarray]:
        q = blk.per_col(e_minus_b)
        q *= blk.per_row(e_theta)
        q += 1.0
        np.reciprocal(q, out=q)
        out = [q]
        while len(out) < power:
            out.append(out[-1] * q)
        return out

    rows, cols = sum_cells(R, q_powers, by)
    return rows if by == "row" else cols


def _calibrate(sub: Responses, rows: np.ndarray, method: Method, *, bias_correction: bool, tol: float,
               max_iter: int, report: Progress) -> tuple:
    """`fit_rasch`'s calibration on the non-extreme submatrix `sub` (its `rows` of the whole):
    (difficulties, their standard errors (CML; None for JML), starting abilities of every row
    (JML; None for CML), the JML bias-correction factor, converged, iterations)."""
    if method == "jml":
        factor = 1.0
        b_sub, theta_sub, converged, n_iter = _jml(sub, tol=tol, max_iter=max_iter, report=report)
        if bias_correction:
            n_per_person = float(np.mean(sub.row_counts))
            factor = (n_per_person - 1.0) / n_per_person
            b_sub = b_sub * factor
        theta_start = np.zeros(rows.size)
        theta_start[rows] = theta_sub * factor
        return b_sub, None, theta_start, factor, converged, n_iter
    # CML works on dense per-pattern groups; its O(L³) cost limits it to short tests anyway
    dense = sub.to_dense()
    b_sub, converged, n_iter = _cml(dense, tol=tol, max_iter=max_iter)
    se_b_sub = _cml_se(dense, b_sub)
    report(f"CML: converged={bool(converged)} after {n_iter} iterations")
    return b_sub, se_b_sub, None, 1.0, converged, n_iter


def fit_rasch(
    X,
    method: Method = "jml",
    *,
    bias_correction: bool = True,
    ability_method: AbilityMethod = "wle",
    tol: float = 1e-6,
    max_iter: int = 500,
    progress: Progress | None = None,
) -> RaschFit:
    """Fit the Rasch model to an examinees x items 0/1 matrix: a dense array (NaN = missing)
    or a sparse :class:`Responses`.

    Difficulties are calibrated on the non-extreme submatrix by JML (with the (L−1)/L
    correction unless ``bias_correction=False``) or CML, centred to mean 0; abilities of all
    persons are then re-estimated with the difficulties fixed (WLE by default); extreme items
    get extreme-score-adjusted difficulties. See the module docstring for the details.
    `progress`, if given, is called with a one-line message after each stage and JML sweep.
    """
    if method not in ("jml", "cml"):
        raise ValueError(f"method must be 'jml' or 'cml', got {method!r}")
    if ability_method not in ("wle", "mle"):
        raise ValueError(f"ability method must be 'wle' or 'mle', got {ability_method!r}")
    report = progress or (lambda message: None)
    R = _as_responses(X)
    ext = _find_extremes(R)
    rows, cols = ~ext.rows, ~ext.cols
    report(f"extremes: {int(ext.rows.sum())} rows and {int(ext.cols.sum())} columns set aside")
    if rows.sum() < 2 or cols.sum() < 2:
        raise ValueError(
            f"response matrix {R.shape}: only {int(rows.sum())} non-extreme rows and "
            f"{int(cols.sum())} non-extreme columns; a Rasch calibration needs at least 2 of each")
    # Abilities use the calibrated items only: an extreme item carries no information on
    # where a person sits relative to the others.
    R_cols = R.take(np.ones(R.shape[0], dtype=bool), cols)
    sub = R_cols.take(rows, np.ones(R_cols.shape[1], dtype=bool))
    b_sub, se_b_sub, theta_start, factor, converged, n_iter = _calibrate(
        sub, rows, method, bias_correction=bias_correction, tol=tol, max_iter=max_iter, report=report)

    b = np.full(R.shape[1], np.nan)
    b[cols] = b_sub
    theta, se_theta = _abilities(R_cols, b_sub, ability_method, theta_start, 1e-8, 200)
    report(f"abilities ({ability_method}) of {R.shape[0]} rows")
    fit = fit_statistics(sub, theta[rows], b_sub)
    report("fit statistics")
    se_b = np.full(R.shape[1], np.nan)
    # JML: 1/sqrt of the information of b given θ, the infit denominator
    se_b[cols] = 1.0 / np.sqrt(fit.information_item) if se_b_sub is None else se_b_sub
    if ext.cols.any():
        finite = np.isfinite(theta)
        b_ext, se_ext = _adjusted_item_difficulty(R.take(finite, ext.cols), theta[finite])
        b[ext.cols], se_b[ext.cols] = b_ext, se_ext
    infit_i = np.full(R.shape[1], np.nan)
    outfit_i = np.full(R.shape[1], np.nan)
    infit_p = np.full(R.shape[0], np.nan)
    outfit_p = np.full(R.shape[0], np.nan)
    infit_i[cols], outfit_i[cols] = fit.infit_item, fit.outfit_item
    infit_p[rows], outfit_p[rows] = fit.infit_person, fit.outfit_person
    return RaschFit(
        method=method, theta=theta, se_theta=se_theta, b=b, se_b=se_b,
        row_status=ext.row_status, col_status=ext.col_status,
        infit_item=infit_i, outfit_item=outfit_i, infit_person=infit_p, outfit_person=outfit_p,
        converged=bool(converged), n_iter=int(n_iter), bias_correction=float(factor),
        ability_method=ability_method,
        notes={"n_calibrated_rows": int(rows.sum()), "n_calibrated_cols": int(cols.sum()),
               "missing_fraction": R.missing_fraction},
    )


def _expit(x: np.ndarray) -> np.ndarray:
    """σ(x) without overflow (numpy only, so the module imports without scipy.special)."""
    return np.exp(-np.logaddexp(0.0, -x))


def _jml(R: Responses, tol: float, max_iter: int, report: Progress) -> tuple[np.ndarray, np.ndarray, bool, int]:
    """Unconditional (joint) ML on a matrix without extreme rows/columns: alternating Newton
    steps for θ (b fixed) and b (θ fixed), b re-centred after each sweep. Returns centred b
    (uncorrected), θ, converged, sweeps."""
    rs, cs = R.row_scores, R.col_scores
    rn, cn = R.row_counts.astype(float), R.col_counts.astype(float)
    theta = np.log(rs / (rn - rs))
    b = -np.log(cs / (cn - cs))
    b -= b.mean()
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        # Σ_q P = n − Σ Q and Σ_q P(1−P) = Σ Q − Σ Q² over answered cells
        q1, q2 = _q_sums(R, theta, b, "row", 2)
        d_theta = np.clip((rs - (rn - q1)) / (q1 - q2), -1.0, 1.0)
        theta = theta + d_theta
        q1, q2 = _q_sums(R, theta, b, "col", 2)
        d_b = np.clip(-(cs - (cn - q1)) / (q1 - q2), -1.0, 1.0)
        b = b + d_b
        shift = b.mean()
        b -= shift
        theta -= shift
        step = max(np.abs(d_theta).max(), np.abs(d_b).max())
        report(f"JML sweep {it}: largest step {step:.2e} logits")
        if step < tol:
            converged = True
            break
    return b, theta, converged, it


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
    R = _as_responses(X, "ability matrix")
    b = np.asarray(b_fixed, dtype=float)
    if b.shape != (R.shape[1],) or not np.isfinite(b).all():
        raise ValueError(f"b_fixed must be {R.shape[1]} finite difficulties, got shape {b.shape}")
    if method not in ("wle", "mle"):
        raise ValueError(f"ability method must be 'wle' or 'mle', got {method!r}")
    return _abilities(R, b, method, theta_start, tol, max_iter)


def _abilities(R: Responses, b: np.ndarray, method: str, theta_start, tol: float,
               max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    n = R.row_counts.astype(float)
    score = R.row_scores
    if method == "mle":
        a = EXTREME_SCORE_ADJUSTMENT
        score = np.where(score == 0, a, np.where(score == n, n - a, score))
    empty = n == 0
    if theta_start is None:
        b_answered = sum_cells(R, lambda blk: [blk.per_col(b)], "row")[0][0]
        theta = np.log((score + 0.5) / (n - score + 0.5)) + b_answered / np.maximum(n, 1)
    else:
        theta = np.asarray(theta_start, dtype=float).copy()
    for _ in range(max_iter):
        sums = _q_sums(R, theta, b, "row", 3 if method == "wle" else 2)
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
    q1, q2 = _q_sums(R, theta, b, "row", 2)
    with np.errstate(divide="ignore"):
        se = 1.0 / np.sqrt(q1 - q2)
    theta[empty] = np.nan
    se[empty] = np.nan
    return theta, se


def _adjusted_item_difficulty(R: Responses, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Difficulty of extreme columns given the (finite) abilities of the rows of `R`: the b
    at which the expected score of the column's respondents is 0.3 from its extreme."""
    n = R.col_counts.astype(float)
    s = R.col_scores
    a = EXTREME_SCORE_ADJUSTMENT
    target = np.where(s == 0, a, np.where(s == n, n - a, s))
    theta_answered = sum_cells(R, lambda blk: [blk.per_row(theta)], "col")[1][0]
    b = theta_answered / np.maximum(n, 1) - np.log(target / np.maximum(n - target, 1e-12))
    for _ in range(200):
        # Σ P = n − Σ Q, Σ P(1−P) = Σ Q − Σ Q²
        q1, q2 = _q_sums(R, theta, b, "col", 2)
        step = np.clip(-(target - (n - q1)) / np.maximum(q1 - q2, 1e-300), -1.0, 1.0)
        step[n == 0] = 0.0
        b = b + step
        if np.abs(step).max() < 1e-8:
            break
    q1, q2 = _q_sums(R, theta, b, "col", 2)
    with np.errstate(divide="ignore"):
        se = 1.0 / np.sqrt(q1 - q2)
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
