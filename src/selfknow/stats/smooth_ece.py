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
all exact: cheap bounds |sum_g ys_g| <= sum_g |ys_g| <= sum_g sum_e |mass_e| op_eg settle the
obvious steps; the rest are screened with a rigorous error bound, rows whose margin falls
inside it being recomputed in float64. The reported value at the selected bandwidth comes
from a longer expansion, its tail at float64 rounding, where its error bound is below 1e-12 of
the value, else in float64 from sum_g |ys_g| = sum_g t_g ys_g with t_g = sign(ys_g): where
the screen fixes t_g, the signed sum runs over prefix sums of the operator's columns at the
few g where t changes, and only the ys_g near a zero crossing are computed one by one
(``_Batch._abs_sum``; this replaces most of the (E, G) product at wide bandwidths).

The screen is a truncated cosine expansion of the operator. Reflection at both ends makes the
smoothing nearly diagonal in the basis cos(pi k e / (E-1)): each column of the operator, its
two end rows doubled (the reflection counts an end point once), is a smooth even function of
the grid position, so its DCT-I coefficients a_kg fall off like exp(-(pi k sigma)^2 / 2). With
c = DCT-I(mass) / 2, computed once per batch by FFT, ys_g = sum_k c_k a_kg; keeping K terms
errs by at most sum_e |mass_e| * sum_{k>=K} |a_kg| at g, and by the sum of that over g in all.
Near sigma = 0.04, about 50 terms replace E = 1001 grid points (about 70 for a value exact
to float64 rounding). At wide bandwidths (sigma > ~0.1) the kernel's truncation at distance
1/2 makes the fall-off algebraic; there the screen keeps 32 terms and bounds their error by
the measured residual (max_e |op_eg - approximation_eg| at g, max_e sum_g of it in all),
loose but far below the wide steps' margins.
"""
from __future__ import annotations

from collections import OrderedDict
from functools import cached_property

import numpy as np

DENSITY_FLOOR = 1e-4  # relplot BaseKernelMixin.smooth(eps=0.0001)
SEARCH_EPS = 1e-3  # relplot smECE(eps=0.001)
SEARCH_REFINE = 10  # relplot search_param(refine=10)
MESH_POINTS = 200  # relplot config.smECE_mesh_pts
# Above this many entries the dense (E x G) smoothing operator is not built; the batch is
# convolved by FFT instead (only bandwidths below ~0.005 get there).
_DENSE_OPERATOR_MAX = 4_000_000
_MIN_ROWS_FOR_OPERATOR = 8
# Cosine screen: the fewest terms (at most _COSINE_TERMS, enough down to sigma ~ 0.015) whose
# tail is at most _COSINE_TAIL of sum_g sum_k |a_kg|; where the tail falls too slowly (wide
# bandwidths), _COSINE_WIDE terms and the measured truncation error. A slack covers rounding.
# Reported values use _COSINE_EXACT_TAIL where that many terms suffice.
_COSINE_TERMS = 192
_COSINE_TAIL = 1e-9
_COSINE_EXACT_TAIL = 1e-15
_COSINE_WIDE = 32
_COSINE_ROUNDING = 1e-14
# A reported value comes from the cosine expansion when its error bound is below this fraction
# of the value, else from the dense float64 product.
_VALUE_TOLERANCE = 1e-12


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
    K(d) = ker[d] for 0 <= d < E, else 0: a Toeplitz term and two Hankel terms (one function
    of i + j, summed first), each row a window of the zero-padded kernel, less the two
    terms the end columns do not have."""
    half = n_e // 2
    padded = np.zeros(5 * n_e)
    padded[2 * n_e: 3 * n_e] = ker  # K(d) = padded[d + 2E]
    hankel = padded.copy()  # hankel[m] = K(m - 2E) + K(m - 4E + 2)
    hankel[2 * n_e - 2:] += padded[: 3 * n_e + 2]
    windows = np.lib.stride_tricks.sliding_window_view(hankel, n_e)
    windows_rev = np.lib.stride_tricks.sliding_window_view(padded[::-1], n_e)
    out = windows_rev[3 * n_e - 1 - rows - half] + windows[2 * n_e + rows + half]
    out[:, 0] -= padded[2 * n_e + rows + half]
    out[:, -1] -= padded[n_e + 1 + rows + half]
    return out


def _expansion(a: np.ndarray, err_per_mass: float, col_err: np.ndarray) -> tuple:
    """(terms, their row sums, bound on sum_g |error_g| and per g bounds on |error_g|, both
    per unit of absolute mass)."""
    return np.ascontiguousarray(a), a.sum(axis=1), err_per_mass, col_err


def _edge_weights(n_e: int) -> np.ndarray:
    """1 inside, 1/2 at both ends: the reflection counts an end point once."""
    w = np.ones(n_e)
    w[[0, -1]] = 0.5
    return w


class _Smoother:
    """The smoothing at one bandwidth: the (E, G) matrix ``op`` mapping grid masses to the
    smoothed curve on the G evaluation points (reflected 'valid' convolution, the centre
    slice, linear interpolation), its row sums, and, built on first use, the truncated cosine
    expansions."""

    def __init__(self, sigma: float):
        n_e, n_g = _grid_sizes(sigma)
        ker = _kernel(sigma, n_e)
        idx, frac = _interp_weights(np.linspace(0, 1, n_g), n_e)
        left, right = _conv_rows(idx, n_e, ker), _conv_rows(idx + 1, n_e, ker)
        self.op = np.ascontiguousarray((left * (1 - frac)[:, None] + right * frac[:, None]).T)
        self.rowsum = self.op.sum(axis=1)

    @cached_property
    def _dct(self) -> tuple[np.ndarray, np.ndarray]:
        """DCT-I coefficients a (E, G) of the operator's columns, end rows doubled, and their
        tails tail[k] = sum_{k' >= k, g} |a_k'g|."""
        from scipy.fft import dct

        n_e = self.op.shape[0]
        a = dct(self.op / _edge_weights(n_e)[:, None], type=1, axis=0) / (n_e - 1)
        a[[0, -1]] /= 2  # DCT-I inverse: the end coefficients count once
        return a, np.cumsum(np.abs(a).sum(axis=1)[::-1])[::-1]

    @cached_property
    def cosine(self) -> tuple:
        """The screen: (a (K, G), its row sums, a bound on sum_g |ys_g - approximation_g| per
        unit of absolute mass, per g bounds on |ys_g - approximation_g| per unit of absolute
        mass); the approximation is (DCT-I(mass) / 2)[:K] @ a, see the module note."""
        return self._terms(_COSINE_TAIL) or self._wide()

    @cached_property
    def cosine_exact(self) -> tuple | None:
        """As ``cosine`` with a tail at float64 rounding, or None where that needs more than
        _COSINE_TERMS terms."""
        return self._terms(_COSINE_EXACT_TAIL)

    def _terms(self, tolerance: float) -> tuple | None:
        a, tail = self._dct
        short = np.flatnonzero(tail[: _COSINE_TERMS + 1] <= tolerance * tail[0])
        if short.size == 0:
            return None
        k = max(int(short[0]), 1)  # |cos| <= 1: the tail bounds the error at every grid point
        rounding = _COSINE_ROUNDING * float(tail[0])
        return _expansion(a[:k], float(tail[k]) + rounding, np.abs(a[k:]).sum(axis=0) + rounding)

    def _wide(self) -> tuple:
        """_COSINE_WIDE terms and their measured truncation error (slow tails)."""
        a, tail = self._dct
        n_e = self.op.shape[0]
        a = a[: min(_COSINE_WIDE, n_e)]
        basis = np.cos(np.pi * np.outer(np.arange(n_e), np.arange(a.shape[0])) / (n_e - 1))
        error = np.abs(self.op - (basis @ a) * _edge_weights(n_e)[:, None])
        rounding = _COSINE_ROUNDING * float(tail[0])
        return _expansion(a, float(error.sum(axis=1).max()) + rounding, error.max(axis=0) + rounding)

    @cached_property
    def prefix(self) -> np.ndarray:
        """The column prefix sums P (E, G + 1), P[:, b] = sum_{g<b} op[:, g]."""
        prefix = np.zeros((self.op.shape[0], self.op.shape[1] + 1))
        np.cumsum(self.op, axis=1, out=prefix[:, 1:])
        return prefix


_OPERATORS: "OrderedDict[float, _Smoother]" = OrderedDict()
_MAX_OPERATORS = 192


def _smoother(sigma: float) -> _Smoother:
    """The smoothing at ``sigma``, kept in a small LRU cache: bootstrap bandwidths recur."""
    if sigma in _OPERATORS:
        _OPERATORS.move_to_end(sigma)
        return _OPERATORS[sigma]
    _OPERATORS[sigma] = _Smoother(sigma)
    if len(_OPERATORS) > _MAX_OPERATORS:
        _OPERATORS.popitem(last=False)
    return _OPERATORS[sigma]


def _use_operator(sigma: float, n_rows: int) -> bool:
    """Whether ``n_rows`` rows at ``sigma`` go through the dense operator rather than the FFT:
    not where the operator would be too large, nor for a few rows at a bandwidth without a
    cached operator (building it costs more than their FFT)."""
    n_e, n_g = _grid_sizes(sigma)
    return n_e * n_g <= _DENSE_OPERATOR_MAX and (n_rows >= _MIN_ROWS_FOR_OPERATOR or sigma in _OPERATORS)


def _fft_smooth(values: np.ndarray, sigma: float) -> np.ndarray:
    """The same map as ``values @ _smoother(sigma).op``, by FFT (rows are replicates)."""
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


def _rows(a: np.ndarray, rows: np.ndarray, cols: int | None = None) -> np.ndarray:
    """a[rows] (a itself when that is all of it), its first ``cols`` columns if given (taken
    before the gather, which then copies only them)."""
    if cols is not None:
        a = a[:, :cols]
    return a if rows.size == a.shape[0] else a[rows]


class _Batch:
    """Scores data sets (f, y) under many count vectors: the rows of every part's ``counts``,
    stacked (parts share bandwidths, so one product serves all of them)."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]):
        self.parts = [(f, f - y, w) for f, y, w in parts]
        self._grid_mass: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._extra: dict[tuple, object] = {}

    def _masses(self, n_e: int) -> tuple[np.ndarray, np.ndarray]:
        """Residual and unit masses on the E-point grid, (rows, E) each (relplot
        smooth_round_to_grid applied to every replicate)."""
        if n_e not in self._grid_mass:
            import scipy.sparse as sp  # keeps `import selfknow.stats` light

            n_rows = sum(counts.shape[0] for _, _, counts in self.parts)
            resid, unit = np.empty((n_rows, n_e)), np.empty((n_rows, n_e))
            start = 0
            for f, r, counts in self.parts:
                n = f.size
                idx, frac = _interp_weights(f, n_e)
                rows = np.tile(np.arange(n), 4)
                cols = np.concatenate([idx, idx + 1, n_e + idx, n_e + idx + 1])
                weights = np.concatenate([1 - frac, frac, (1 - frac) * r, frac * r])
                # Unit masses in the first E rows, residual masses in the next E.
                spread_t = sp.csr_matrix((weights, (cols, rows)), shape=(2 * n_e, n))
                # (n, B) C-contiguous operands keep scipy from copying the dense side.
                both = spread_t @ np.ascontiguousarray(counts.T)
                # Transposed part by part: a part fits in cache, the whole batch does not.
                stop = start + counts.shape[0]
                unit[start:stop] = both[:n_e].T
                resid[start:stop] = both[n_e:].T
                start = stop
            self._grid_mass[n_e] = (resid, unit)
        return self._grid_mass[n_e]

    def at(self, sigma: float, rows: np.ndarray, screen: bool = False,
           dens_sum: np.ndarray | None = None, precise: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """smECE_sigma for the replicates ``rows`` at one bandwidth, and a bound on its error.

        sum_g |r_hat_g| dens_g equals sum_g |smoothed residual_g| (dens > 0), and sum_g dens_g
        is linear in the grid mass, so only the residual curve needs the full smoothing.
        With ``screen`` the smoothing runs through the screen's cosine expansion, the bound
        being its truncation error; with ``precise``, through the expansion with its tail at
        float64 rounding, where one with at most _COSINE_TERMS terms exists. Otherwise it is
        computed in float64 (``_abs_sum``, or by FFT), the bound being 0."""
        n_e, n_g = _grid_sizes(sigma)
        resid, unit = self._masses(n_e)
        if _use_operator(sigma, rows.size):
            smoother = _smoother(sigma)
            expansion = smoother.cosine_exact if precise else smoother.cosine if screen else None
            if expansion is not None:
                return self._expanded(expansion, n_e, n_g, rows, dens_sum)
            if dens_sum is None:
                dens_sum = _rows_matvec(unit, rows, smoother.rowsum) + n_g * DENSITY_FLOOR
            return self._abs_sum(smoother, n_e, rows) / dens_sum, np.zeros(rows.size)
        smooth = _fft_smooth(np.concatenate([resid[rows], unit[rows]], axis=0), sigma)
        dens_sum = np.sum(smooth[rows.size:] + DENSITY_FLOOR, axis=1)
        return np.sum(np.abs(smooth[: rows.size]), axis=1) / dens_sum, np.zeros(rows.size)

    def _abs_sum(self, smoother: _Smoother, n_e: int, rows: np.ndarray) -> np.ndarray:
        """sum_g |ys_g| for ``rows`` in float64, without the whole (rows, E) x (E, G) product.

        Where the screen's approximation fixes the sign t_g of ys_g (its distance from 0
        exceeds its error bound), sum_g t_g ys_g = sum_b (t_{b-1} - t_b) mass . P[:, b]
        (t_{-1} = t_G = 0; P the operator's column prefix sums) needs only the b where t
        changes, a few per row since the smoothed residual changes sign a few times; the
        other ys_g are computed one by one. The rows share one product with the union of
        their columns (the dense product when that is most of them, or for a few rows)."""
        mass = _rows(self._masses(n_e)[0], rows)
        if rows.size >= _MIN_ROWS_FOR_OPERATOR:  # for fewer, the screen and prefix sums cost more
            a, _, _, err = smoother.cosine
            approx = _rows(self._cosine_coeffs(n_e, 0), rows, a.shape[0]) @ a
            known = np.abs(approx) > np.outer(_rows(self._totals(n_e)[0], rows), err)
            t = np.where(known, np.sign(approx), 0.0)
            step = np.zeros((rows.size, t.shape[1] + 1))
            step[:, 1:] = t
            step[:, :-1] -= t
            breaks = np.flatnonzero(step[:, 1:].any(axis=0)) + 1  # P[:, 0] = 0
            unknown = np.flatnonzero(~known.all(axis=0))
            if 2 * (breaks.size + unknown.size) <= t.shape[1]:
                total = np.einsum("rb,rb->r", mass @ smoother.prefix[:, breaks], step[:, breaks])
                if unknown.size:
                    total += np.einsum("rg,rg->r", np.abs(mass @ smoother.op[:, unknown]), ~known[:, unknown])
                return total
        return np.sum(np.abs(mass @ smoother.op), axis=1)

    def bounds(self, sigma: float, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Cheap (matrix-vector) bounds lb <= smECE_sigma <= ub for ``rows``, from
        |sum_g ys_g| <= sum_g |ys_g| <= sum_g sum_e |mass_e| op_eg; None where the operator
        is not used (small batches, tiny bandwidths)."""
        if not _use_operator(sigma, rows.size):
            return None
        n_e, n_g = _grid_sizes(sigma)
        resid, unit = self._masses(n_e)
        op_rowsum = _smoother(sigma).rowsum
        dens_sum = _rows_matvec(unit, rows, op_rowsum) + n_g * DENSITY_FLOOR
        lb = np.abs(_rows_matvec(resid, rows, op_rowsum)) / dens_sum
        ub = _rows_matvec(self._abs_resid(n_e), rows, op_rowsum) / dens_sum
        return lb, ub, dens_sum

    def _expanded(self, expansion: tuple, n_e: int, n_g: int,
                  rows: np.ndarray, dens_sum: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``at`` through a cosine expansion (``_expansion``: a, its row sums, error per unit
        of mass; the per-g bounds are ``_abs_sum``'s). The
        density sum, unless given, comes from the same expansion (sum_g dens_g expands with
        the coefficients summed over g, within the same error per unit of mass); with
        |T - T'| <= eT and |D - D'| <= eD, |T/D - T'/D'| <= (eT + (T'/D') eD) / (D' - eD)."""
        a, a_sum, err_per_mass, _ = expansion
        k = a.shape[0]
        total = np.sum(np.abs(_rows(self._cosine_coeffs(n_e, 0), rows, k) @ a), axis=1)
        e_total = _rows(self._totals(n_e)[0], rows) * err_per_mass
        if dens_sum is not None:
            return total / dens_sum, e_total / dens_sum
        dens_sum = _rows(self._cosine_coeffs(n_e, 1), rows, k) @ a_sum + n_g * DENSITY_FLOOR
        e_dens = _rows(self._totals(n_e)[1], rows) * err_per_mass
        value = total / dens_sum
        low = dens_sum - e_dens
        err = np.full(rows.size, np.inf)
        np.divide(e_total + value * e_dens, low, out=err, where=low > 0)
        return value, err

    def _cosine_coeffs(self, n_e: int, which: int) -> np.ndarray:
        """DCT-I(mass) / 2 of every row, the first _COSINE_TERMS terms: of the residual
        masses (``which`` 0) or the unit masses (1). (Bisections reach bandwidths that need
        nearly all of them, where one DCT costs less than a product with the basis.)"""
        key = ("cos", n_e, which)
        if key not in self._extra:
            from scipy.fft import dct

            self._extra[key] = np.ascontiguousarray(
                dct(self._masses(n_e)[which], type=1, axis=1)[:, :_COSINE_TERMS] / 2)
        return self._extra[key]

    def _totals(self, n_e: int) -> tuple[np.ndarray, np.ndarray]:
        """Per row: total absolute residual mass and total unit mass."""
        key = ("totals", n_e)
        if key not in self._extra:
            self._extra[key] = (self._abs_resid(n_e).sum(axis=1), self._masses(n_e)[1].sum(axis=1))
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
    parts = []
    for conf, correct, counts in datasets:
        f, y = _check(conf, correct)
        parts.append((f, y, _check_counts(counts, f.size)))
    return smooth_ece_counts(parts, return_sigma=return_sigma)


def smooth_ece_counts(parts, *, return_sigma: bool = False) -> list:
    """``smooth_ece_multi`` without its input checks, for callers that build valid input:
    (conf, 0/1 correct, (B, n) multiplicities with positive row sums) float64 triples."""
    sizes = [w.shape[0] for _, _, w in parts]
    batch = _Batch(parts)
    value, sigma = _bisect(batch, sum(sizes))
    bounds = np.cumsum([0] + sizes)
    pieces = [(value[a:b], sigma[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return pieces if return_sigma else [v for v, _ in pieces]


def _below(batch: "_Batch", s: float, rows: np.ndarray, bnd) -> np.ndarray:
    """relplot's predicate s < smECE_s for ``rows``: settled by the cheap bounds ``bnd`` (from
    ``batch.bounds``, or None) where they suffice, else screened, rows whose margin lies within
    the screen's error bound recomputed in float64."""
    below = np.zeros(rows.size, dtype=bool)
    todo, dens = np.arange(rows.size), None
    if bnd is not None:
        lb, ub, dens = bnd
        sure_true = lb * (1 - 1e-9) > s  # 1e-9 covers the bounds' float64 rounding
        sure_false = ub * (1 + 1e-9) < s
        below[sure_true] = True
        todo = np.flatnonzero(~(sure_true | sure_false))
        dens = dens[todo]
        if todo.size == 0:
            return below
    val, err = batch.at(s, rows[todo], screen=True, dens_sum=dens)
    unsure = np.abs(val - s) <= err
    if unsure.any():
        val[unsure] = batch.at(s, rows[todo][unsure])[0]
    below[todo] = s < val
    return below


def _bisect(batch: "_Batch", n_rep: int) -> tuple[np.ndarray, np.ndarray]:
    """relplot's bandwidth search for all ``n_rep`` rows of ``batch``; (values, sigmas)."""

    # The cheap bounds barely move with sigma (the operator's row sums are nearly constant), so
    # they are tried only on rows whose bounds at sigma = 1 came within a factor 2 of settling.
    first = batch.bounds(1.0, np.arange(n_rep))
    hint_lb, hint_ub = (first[0], first[1]) if first is not None else (np.zeros(n_rep), np.full(n_rep, np.inf))

    def decide(sigma_values: np.ndarray, need: np.ndarray) -> np.ndarray:
        """relplot's predicate sigma < smECE_sigma for the rows ``need``."""
        below = np.zeros(n_rep, dtype=bool)
        for s in np.unique(sigma_values[need]):
            rows = np.flatnonzero(need & (sigma_values == s))
            hopeful = (hint_ub[rows] < 2 * s) | (hint_lb[rows] > s / 2)
            for group, bounded in ((rows[hopeful], True), (rows[~hopeful], False)):
                if group.size:
                    bnd = batch.bounds(float(s), group) if bounded else None
                    below[group] = _below(batch, float(s), group, bnd)
        return below

    searching = ~_below(batch, 1.0, np.arange(n_rep), first)  # accept sigma = 1 if 1 < smECE_1
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
    for s in np.unique(sigma):  # the reported value
        rows = np.flatnonzero(sigma == s)
        val, err = batch.at(float(s), rows, precise=True)
        loose = err > _VALUE_TOLERANCE * val
        if loose.any():
            val[loose] = batch.at(float(s), rows[loose])[0]
        value[rows] = val
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
