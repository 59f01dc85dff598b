"""SmoothECE (Blasiok & Nakkiran 2024), vectorised over bootstrap replicates.

The persistent-calibration paper (§2, §A.2) reports ECE as SmoothECE with its automatic
bandwidth; the reference implementation is ``relplot.smECE``. This module reproduces that
definition exactly (same grids, same discretised reflected Gaussian kernel, same bandwidth
search) so that values agree with ``relplot`` to floating-point rounding:

* residuals r_i = f_i - y_i are spread linearly onto an evaluation grid of E points
  (E = max(2000, round(20/sigma)) // 2 + 1), as is a unit mass per sample;
* both are convolved with a Gaussian of width sigma, the data reflected at 0 and 1;
* the two smoothed curves are interpolated onto G = max(round(10/sigma), 200) points,
  dens = smoothed mass + 1e-4, r_hat = smoothed residual / dens, and
  smECE_sigma = sum |r_hat| dens / sum dens;
* sigma* is relplot's bisection for the fixed point sigma = smECE_sigma: accept sigma = 1 if
  1 < smECE_1, else 10 halvings of [0, 1] keeping the upper end where sigma >= smECE_sigma
  (any sigma < eps = 1e-3 counts as "below").

The 1e-4 density floor is absolute, so a sample weight behaves exactly like duplicating the
sample: weights must be multiplicities (bootstrap counts), not normalised weights. That is what
lets one bootstrap replicate (a multiset of the original samples) be scored from its count
vector, and B replicates from a (B, n) count matrix at once.

Batch evaluation: the grid masses of all replicates are one sparse product; for a bandwidth
the whole smoothing (reflected convolution + interpolation) is one cached dense (E, G)
operator, so smECE_sigma of many replicates is one matrix product (an FFT route covers tiny
bandwidths and one-off bandwidths of a few rows). Only the bisection's *decisions* use shortcuts,
both exact: cheap bounds |sum_g ys_g| <= sum_g |ys_g| <= sum_g sum_e |mass_e| op_eg settle the
obvious steps, and the remaining products run in float32 with a rigorous rounding bound,
rows whose margin falls inside it being recomputed in float64. The reported value at the
selected bandwidth is always computed in float64.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

DENSITY_FLOOR = 1e-4  # relplot BaseKernelMixin.smooth(eps=0.0001)
SEARCH_EPS = 1e-3  # relplot smECE(eps=0.001)
SEARCH_REFINE = 10  # relplot search_param(refine=10)
MESH_POINTS = 200  # relplot config.smECE_mesh_pts
# Above this many entries the dense (E x G) smoothing operator is not built; the batch is
# convolved by FFT instead (only bandwidths below ~0.005 get there).
_DENSE_OPERATOR_MAX = 4_000_000
_MIN_ROWS_FOR_OPERATOR = 8


def _grid_sizes(sigma: float) -> tuple[int, int]:
    kernel_points = max(2000, round(20 / sigma)) // 2 + 1
    eval_points = max(round(10 / sigma), MESH_POINTS)
    return kernel_points, eval_points


def _kernel(sigma: float, n_points: int) -> np.ndarray:
    t = np.linspace(0, 1, n_points)
    k = np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2))
    return k / (np.sqrt(2 * np.pi) * sigma)


def _interp_weights(x: np.ndarray, n_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Left grid index and right-hand weight of linear interpolation on linspace(0,1,n)."""
    idx = (x * (n_points - 1)).astype(int).clip(0, n_points - 2)
    frac = x * (n_points - 1) - idx
    return idx, frac


def _reflection_sources(n_points: int) -> np.ndarray:
    """For the reflected sequence [flip(v)[:-1], v, flip(v)[1:]], the index into v."""
    e = np.arange(3 * n_points - 2)
    return np.where(e < n_points - 1, n_points - 1 - e,
                    np.where(e <= 2 * n_points - 2, e - (n_points - 1), 3 * n_points - 3 - e))


def _conv_rows(rows: np.ndarray, n_e: int, ker: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of the (E, E) reflected-convolution matrix R (smoothed = R @ values).

    np.convolve(ext, ker, 'valid')[i + E//2] = sum_k ker[k] ext[i + E//2 + E-1 - k] with
    ext = [v[E-1..1], v, v[E-2..0]]; collecting the three copies of v[j] gives
    R[i, j] = K(i - j + E//2) + [j >= 1] K(i + j + E//2) + [j <= E-2] K(i + j + E//2 - 2E + 2),
    K(d) = ker[d] for 0 <= d < E, else 0: one Toeplitz and two Hankel terms, each row a
    window of the zero-padded kernel."""
    half = n_e // 2
    padded = np.zeros(5 * n_e)
    padded[2 * n_e: 3 * n_e] = ker  # K(d) = padded[d + 2E]
    windows = np.lib.stride_tricks.sliding_window_view(padded, n_e)
    windows_rev = np.lib.stride_tricks.sliding_window_view(padded[::-1], n_e)
    toeplitz = windows_rev[3 * n_e - 1 - rows - half]
    hankel_low = windows[2 * n_e + rows + half]
    hankel_high = windows[rows + half + 2]
    out = toeplitz + hankel_low + hankel_high
    out[:, 0] -= hankel_low[:, 0]
    out[:, -1] -= hankel_high[:, -1]
    return out


_OPERATORS: "OrderedDict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()
_MAX_OPERATORS = 192


def _dense_operator(sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(E, G) matrix mapping grid masses to the smoothed curve on the G evaluation points
    (reflected 'valid' convolution, the centre slice, linear interpolation), its row sums,
    and a float32 copy.
    Kept in a small LRU cache: bootstrap bandwidths recur."""
    if sigma in _OPERATORS:
        _OPERATORS.move_to_end(sigma)
        return _OPERATORS[sigma]
    n_e, n_g = _grid_sizes(sigma)
    ker = _kernel(sigma, n_e)
    idx, frac = _interp_weights(np.linspace(0, 1, n_g), n_e)
    needed = np.unique(np.concatenate([idx, idx + 1]))
    conv = _conv_rows(needed, n_e, ker)
    left = conv[np.searchsorted(needed, idx)]
    right = conv[np.searchsorted(needed, idx + 1)]
    op = np.ascontiguousarray((left * (1 - frac)[:, None] + right * frac[:, None]).T)
    _OPERATORS[sigma] = (op, op.sum(axis=1), op.astype(np.float32))
    if len(_OPERATORS) > _MAX_OPERATORS:
        _OPERATORS.popitem(last=False)
    return _OPERATORS[sigma]


def _fft_smooth(values: np.ndarray, sigma: float) -> np.ndarray:
    """The same map as ``values @ _dense_operator(sigma)``, by FFT (rows are replicates)."""
    from scipy.signal import fftconvolve

    n_e, n_g = _grid_sizes(sigma)
    ext = values[:, _reflection_sources(n_e)]
    full = fftconvolve(ext, _kernel(sigma, n_e)[None, :], mode="valid", axes=1)
    smoothed = full[:, n_e // 2: n_e // 2 + n_e]
    idx, frac = _interp_weights(np.linspace(0, 1, n_g), n_e)
    return smoothed[:, idx] * (1 - frac) + smoothed[:, idx + 1] * frac


def _rows_matvec(a: np.ndarray, rows: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(a @ v)[rows] without copying most of ``a`` when ``rows`` covers most of it."""
    if rows.size * 3 >= a.shape[0]:
        return (a @ v)[rows]
    return a[rows] @ v


def _rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return a if rows.size == a.shape[0] else a[rows]


class _Batch:
    """Scores data sets (f, y) under many count vectors: the rows of every part's ``counts``,
    stacked (parts share bandwidths, so one product serves all of them)."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]):
        self.parts = [(f, f - y, w) for f, y, w in parts]
        self._grid_mass: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._extra: dict[tuple[str, int], np.ndarray] = {}

    def _masses(self, n_e: int) -> tuple[np.ndarray, np.ndarray]:
        """Residual and unit masses on the E-point grid, (rows, E) each (relplot
        smooth_round_to_grid applied to every replicate)."""
        if n_e not in self._grid_mass:
            import scipy.sparse as sp  # keeps `import selfknow.stats` light

            resid_parts, unit_parts = [], []
            for f, r, counts in self.parts:
                n = f.size
                idx, frac = _interp_weights(f, n_e)
                rows = np.concatenate([np.arange(n), np.arange(n)])
                cols = np.concatenate([idx, idx + 1])
                spread_t = sp.csr_matrix((np.concatenate([1 - frac, frac]), (cols, rows)),
                                         shape=(n_e, n))
                # (n, B) C-contiguous operands keep scipy from copying the dense side.
                counts_t = np.ascontiguousarray(counts.T)
                unit_parts.append((spread_t @ counts_t).T)
                resid_parts.append((spread_t @ (counts_t * r[:, None])).T)
            self._grid_mass[n_e] = (np.ascontiguousarray(np.concatenate(resid_parts)),
                                    np.ascontiguousarray(np.concatenate(unit_parts)))
        return self._grid_mass[n_e]

    def at(self, sigma: float, rows: np.ndarray, screen: bool = False,
           dens_sum: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """smECE_sigma for the replicates ``rows`` at one bandwidth, and a bound on its error.

        sum_g |r_hat_g| dens_g equals sum_g |smoothed residual_g| (dens > 0), and sum_g dens_g
        is linear in the grid mass, so only the residual curve needs the full smoothing.
        With ``screen`` the smoothing product runs in float32 (twice as fast) and the bound
        is the standard dot-product rounding bound (E + 2) u sum_e |mass_e| op_eg (u = 2^-24,
        doubled for safety), summed over g; otherwise the bound is 0 (float64 throughout)."""
        n_e, n_g = _grid_sizes(sigma)
        resid, unit = self._masses(n_e)
        # A few rows at a new bandwidth are cheaper by FFT than by building the operator.
        if n_e * n_g <= _DENSE_OPERATOR_MAX and (rows.size >= _MIN_ROWS_FOR_OPERATOR or sigma in _OPERATORS):
            op, op_rowsum, op32 = _dense_operator(sigma)
            if dens_sum is None:
                dens_sum = _rows_matvec(unit, rows, op_rowsum) + n_g * DENSITY_FLOOR
            if screen:
                ys = _rows(self._resid32(n_e), rows) @ op32
                total = np.sum(np.abs(ys), axis=1, dtype=np.float64)
                gamma = (n_e + 2) * 2.0**-23
                err = gamma * _rows_matvec(self._abs_resid(n_e), rows, op_rowsum) / dens_sum
                return total / dens_sum, err
            ys = _rows(resid, rows) @ op
        else:
            smooth = _fft_smooth(np.concatenate([resid[rows], unit[rows]], axis=0), sigma)
            ys = smooth[: rows.size]
            dens_sum = np.sum(smooth[rows.size:] + DENSITY_FLOOR, axis=1)
        return np.sum(np.abs(ys), axis=1) / dens_sum, np.zeros(rows.size)

    def bounds(self, sigma: float, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Cheap (matrix-vector) bounds lb <= smECE_sigma <= ub for ``rows``, from
        |sum_g ys_g| <= sum_g |ys_g| <= sum_g sum_e |mass_e| op_eg; None where the operator
        is not used (small batches, tiny bandwidths)."""
        n_e, n_g = _grid_sizes(sigma)
        if n_e * n_g > _DENSE_OPERATOR_MAX or (rows.size < _MIN_ROWS_FOR_OPERATOR and sigma not in _OPERATORS):
            return None
        resid, unit = self._masses(n_e)
        _, op_rowsum, _ = _dense_operator(sigma)
        dens_sum = _rows_matvec(unit, rows, op_rowsum) + n_g * DENSITY_FLOOR
        lb = np.abs(_rows_matvec(resid, rows, op_rowsum)) / dens_sum
        ub = _rows_matvec(self._abs_resid(n_e), rows, op_rowsum) / dens_sum
        return lb, ub, dens_sum

    def _resid32(self, n_e: int) -> np.ndarray:
        key = ("f32", n_e)
        if key not in self._extra:
            self._extra[key] = self._masses(n_e)[0].astype(np.float32)
        return self._extra[key]

    def _abs_resid(self, n_e: int) -> np.ndarray:
        key = ("abs", n_e)
        if key not in self._extra:
            self._extra[key] = np.abs(self._masses(n_e)[0])
        return self._extra[key]


def _check(conf, correct) -> tuple[np.ndarray, np.ndarray]:
    f = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=float)
    if f.ndim != 1 or f.shape != y.shape:
        raise ValueError(f"confidence and correctness must be 1-D of one length, got {f.shape} and {y.shape}")
    if f.size == 0:
        raise ValueError("SmoothECE needs at least one sample")
    if not np.all(np.isfinite(f)) or f.min() < 0 or f.max() > 1:
        bad = int(np.flatnonzero(~np.isfinite(f) | (f < 0) | (f > 1))[0])
        raise ValueError(f"confidence must lie in [0, 1]; row {bad} is {f[bad]!r}")
    if not np.all((y == 0) | (y == 1)):
        bad = int(np.flatnonzero((y != 0) & (y != 1))[0])
        raise ValueError(f"correctness must be 0/1; row {bad} is {y[bad]!r}")
    return f, y


def _check_counts(counts, n: int) -> np.ndarray:
    w = np.asarray(counts, dtype=float)
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"counts must be (B, {n}), got {w.shape}")
    if w.min() < 0 or w.sum(axis=1).min() <= 0:
        raise ValueError("counts must be non-negative with a positive total in every row")
    return w


def smooth_ece_batch(conf, correct, counts, *, return_sigma: bool = False):
    """SmoothECE with relplot's automatic bandwidth for every row of ``counts``.

    ``conf``/``correct``: the n original samples; ``counts``: (B, n) non-negative
    multiplicities, row b describing replicate b as a multiset of the samples. Returns (B,)
    values (and the (B,) selected bandwidths when ``return_sigma``). Each row equals
    ``relplot.smECE(np.repeat(conf, c), np.repeat(correct, c))``.
    """
    out = smooth_ece_multi([(conf, correct, counts)], return_sigma=return_sigma)
    return out[0]


def smooth_ece_multi(datasets, *, return_sigma: bool = False) -> list:
    """``smooth_ece_batch`` for several data sets at once: ``datasets`` is a sequence of
    (conf, correct, counts) triples; returns one result per triple. Sharing the bisection
    lets replicates of different data sets that meet the same bandwidth share one product."""
    parts, sizes = [], []
    for conf, correct, counts in datasets:
        f, y = _check(conf, correct)
        w = _check_counts(counts, f.size)
        parts.append((f, y, w))
        sizes.append(w.shape[0])
    batch = _Batch(parts)
    value, sigma = _bisect(batch, sum(sizes))
    bounds = np.cumsum([0] + sizes)
    pieces = [(value[a:b], sigma[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return pieces if return_sigma else [v for v, _ in pieces]


def _bisect(batch: "_Batch", n_rep: int) -> tuple[np.ndarray, np.ndarray]:
    """relplot's bandwidth search for all ``n_rep`` rows of ``batch``; (values, sigmas)."""

    def decide(sigma_values: np.ndarray, need: np.ndarray) -> np.ndarray:
        """relplot's predicate sigma < smECE_sigma for the rows ``need``: screened in float32,
        rows whose margin is within the rounding bound recomputed in float64."""
        below = np.zeros(n_rep, dtype=bool)
        for s in np.unique(sigma_values[need]):
            rows = np.flatnonzero(need & (sigma_values == s))
            bnd = batch.bounds(float(s), rows)
            if bnd is not None:
                # Decided by the bounds alone (1e-9 covers their float64 rounding).
                lb, ub, dens = bnd
                sure_true = lb * (1 - 1e-9) > s
                sure_false = ub * (1 + 1e-9) < s
                below[rows[sure_true]] = True
                keep = ~(sure_true | sure_false)
                rows, dens = rows[keep], dens[keep]
                if rows.size == 0:
                    continue
            else:
                dens = None
            val, err = batch.at(float(s), rows, screen=True, dens_sum=dens)
            unsure = np.abs(val - s) <= err
            if unsure.any():
                val[unsure] = batch.at(float(s), rows[unsure])[0]
            below[rows] = s < val
        return below

    everyone = np.ones(n_rep, dtype=bool)
    searching = ~decide(np.ones(n_rep), everyone)  # accept sigma = 1 if 1 < smECE_1
    lo = np.zeros(n_rep)  # relplot's `end`: predicate true (sigma below its smECE)
    hi = np.ones(n_rep)  # relplot's `start`: predicate false; the returned width
    for _ in range(SEARCH_REFINE):
        mid = (hi + lo) / 2
        need = searching & (mid >= SEARCH_EPS)
        below = decide(mid, need)
        below[searching & (mid < SEARCH_EPS)] = True
        lo = np.where(searching & below, mid, lo)
        hi = np.where(searching & ~below, mid, hi)
    sigma = np.where(searching, hi, 1.0)
    value = np.empty(n_rep)
    for s in np.unique(sigma):  # the reported value, in float64
        rows = np.flatnonzero(sigma == s)
        value[rows] = batch.at(float(s), rows)[0]
    return value, sigma


def smooth_ece(conf, correct, weights=None) -> float:
    """SmoothECE of one data set (relplot.smECE, eps=1e-3); ``weights`` are optional sample
    multiplicities (see the module note)."""
    f, _ = _check(conf, correct)
    w = np.ones((1, f.size)) if weights is None else np.asarray(weights, dtype=float)[None, :]
    return float(smooth_ece_batch(conf, correct, w)[0])


def smooth_ece_width(conf, correct, weights=None) -> tuple[float, float]:
    """(SmoothECE, selected bandwidth sigma*), as ``relplot.smECE(..., return_width=True)``."""
    f, _ = _check(conf, correct)
    w = np.ones((1, f.size)) if weights is None else np.asarray(weights, dtype=float)[None, :]
    value, sigma = smooth_ece_batch(conf, correct, w, return_sigma=True)
    return float(value[0]), float(sigma[0])


def smooth_ece_sigma(conf, correct, sigma: float, weights=None) -> float:
    """SmoothECE at a fixed bandwidth ``sigma`` (relplot.smECE_sigma)."""
    f, y = _check(conf, correct)
    if not 0 < sigma <= 1:
        raise ValueError(f"sigma must lie in (0, 1], got {sigma}")
    w = np.ones((1, f.size)) if weights is None else np.asarray(weights, dtype=float)[None, :]
    return float(_Batch([(f, y, w)]).at(float(sigma), np.array([0]))[0][0])
