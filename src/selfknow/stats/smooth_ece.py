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
  smECE_sigma = sum |r_hat| dens / sum dens = sum |smoothed residual| / sum dens;
* sigma* is relplot's bisection for the fixed point sigma = smECE_sigma: 10 halvings of
  [0, 1] keeping the upper end where sigma >= smECE_sigma (any sigma < eps = 1e-3 counts as
  "below"); the value reported is smECE at sigma*.

The 1e-4 density floor is absolute, so a sample weight behaves exactly like duplicating the
sample: weights must be multiplicities (bootstrap counts), not normalised weights. That is what
lets one bootstrap replicate (a multiset of the original samples) be scored from its count
vector, and B replicates from a (B, n) count matrix at once.

Two computation paths, both in float64 and equal to relplot up to rounding:

* the reference path (``_Part.reference``): relplot's steps on each replicate's grid masses
  (reflect, convolve, take the centre slice, interpolate), the convolution by FFT where
  relplot calls ``np.convolve``;
* the fast path (``_Part.fast``): spreading onto the grid, the reflected convolution, its
  centre slice and the interpolation are all linear, so the smoothed residuals of B replicates
  are counts (B, n) @ spread (n, E) @ operator (E, G), the (E, G) operator built once per
  bandwidth and cached (the bisection's bandwidths are dyadic, so they recur over replicates,
  data sets and methods). The product is associated so that its inner dimension is the
  smaller of n and E.

``_operator`` chooses: the reference path for the tiny bandwidths (sigma below ~0.005) whose
operator would be too large, and for a few rows (single data sets, deep bisection steps),
where building the operator costs more than it saves; by bandwidth and rows alone, so that a
value never depends on what the cache holds.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

DENSITY_FLOOR = 1e-4  # relplot BaseKernelMixin.smooth(eps=0.0001)
SEARCH_EPS = 1e-3  # relplot smECE(eps=0.001)
SEARCH_REFINE = 10  # relplot search_param(refine=10)
MESH_POINTS = 200  # relplot config.smECE_mesh_pts
# Bandwidths whose (E x G) operator has more entries than this (sigma below ~0.005) take the
# reference path: the operator would cost more memory than its product saves.
_DENSE_OPERATOR_MAX = 4_000_000
# The operator cache's budget: the bisection's bandwidths recur over replicates and data sets.
_CACHE_BYTES = 256 * 2**20
# Building an operator costs about as much as the reference path on this many rows: fewer rows
# (single data sets, deep bisection steps) take the reference path, cached operator or not.
_MIN_ROWS_FOR_OPERATOR = 32


class SmoothEce(NamedTuple):
    """SmoothECE and the bandwidth sigma* it was computed at (per replicate, or one of each)."""

    value: np.ndarray | float
    sigma: np.ndarray | float


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


def _fft_smooth(values: np.ndarray, sigma: float) -> np.ndarray:
    """The same map as ``values @ _operator(sigma).matrix``, by FFT (rows are replicates)."""
    from scipy.signal import fftconvolve

    n_e, n_g = _grid_sizes(sigma)
    ext = values[:, _reflection_sources(n_e)]
    full = fftconvolve(ext, _kernel(sigma, n_e)[None, :], mode="valid", axes=1)
    smoothed = full[:, n_e // 2: n_e // 2 + n_e]
    idx, frac = _interp_weights(np.linspace(0, 1, n_g), n_e)
    return smoothed[:, idx] * (1 - frac) + smoothed[:, idx + 1] * frac


class _Operator:
    """The smoothing at one bandwidth: the (E, G) matrix ``matrix`` mapping grid masses to the
    smoothed curve on the G evaluation points (reflected 'valid' convolution, the centre
    slice, linear interpolation), and its row sums (what a unit of grid mass adds to sum_g)."""

    def __init__(self, sigma: float):
        n_e, n_g = _grid_sizes(sigma)
        ker = _kernel(sigma, n_e)
        idx, frac = _interp_weights(np.linspace(0, 1, n_g), n_e)
        left, right = _conv_rows(idx, n_e, ker), _conv_rows(idx + 1, n_e, ker)
        self.matrix = np.ascontiguousarray((left * (1 - frac)[:, None] + right * frac[:, None]).T)
        self.rowsum = self.matrix.sum(axis=1)


_OPERATORS: "OrderedDict[float, _Operator]" = OrderedDict()


def _operator(sigma: float, n_rows: int) -> _Operator | None:
    """The operator at ``sigma`` (from a least-recently-used cache of at most _CACHE_BYTES),
    or None where ``n_rows`` rows should take the reference path: the operator would be too
    large, or too costly to build for them. The choice reads ``sigma`` and ``n_rows`` only,
    never the cache, so a result does not depend on what the process computed before (the two
    paths differ in the last bits)."""
    n_e, n_g = _grid_sizes(sigma)
    if n_e * n_g > _DENSE_OPERATOR_MAX or n_rows < _MIN_ROWS_FOR_OPERATOR:
        return None
    if sigma in _OPERATORS:
        _OPERATORS.move_to_end(sigma)
        return _OPERATORS[sigma]
    _OPERATORS[sigma] = _Operator(sigma)
    while sum(o.matrix.nbytes for o in _OPERATORS.values()) > _CACHE_BYTES and len(_OPERATORS) > 1:
        _OPERATORS.popitem(last=False)
    return _OPERATORS[sigma]


class _Part:
    """One data set (f, y) and the (B, n) multiplicities of its replicates."""

    def __init__(self, f: np.ndarray, y: np.ndarray, counts: np.ndarray):
        self.f, self.resid, self.counts = f, f - y, counts
        self._spreads: dict[int, tuple] = {}
        self._masses: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _spread(self, n_e: int) -> tuple:
        """The (n, E) sparse matrices spreading each sample's residual and unit mass linearly
        onto the E-point grid (relplot's smooth_round_to_grid)."""
        if n_e not in self._spreads:
            import scipy.sparse as sp  # keeps `import selfknow.stats` light

            n = self.f.size
            idx, frac = _interp_weights(self.f, n_e)
            rows = np.tile(np.arange(n), 2)
            cols = np.concatenate([idx, idx + 1])
            unit = np.concatenate([1 - frac, frac])
            self._spreads[n_e] = tuple(sp.csr_matrix((w, (rows, cols)), shape=(n, n_e))
                                       for w in (unit * np.tile(self.resid, 2), unit))
        return self._spreads[n_e]

    def masses(self, n_e: int) -> tuple[np.ndarray, np.ndarray]:
        """Residual and unit grid masses of every replicate, (B, E) each."""
        if n_e not in self._masses:
            # (E, n) @ (n, B) with C-contiguous operands: scipy copies neither side.
            counts_t = np.ascontiguousarray(self.counts.T)
            self._masses[n_e] = tuple(np.ascontiguousarray((s.T.tocsr() @ counts_t).T)
                                      for s in self._spread(n_e))
        return self._masses[n_e]

    def fast(self, sigma: float, rows: np.ndarray, op: _Operator) -> np.ndarray:
        """smECE_sigma of the replicates ``rows`` through ``op``, the operator at ``sigma``."""
        n_e, n_g = _grid_sizes(sigma)
        if self.f.size < n_e:  # counts @ (spread @ operator): the inner dimension is n
            resid, unit = self._spread(n_e)
            counts = self.counts[rows]
            smoothed = counts @ (resid @ op.matrix)
            dens_sum = counts @ (unit @ op.rowsum)
        else:  # (counts @ spread) @ operator: the inner dimension is E
            resid, unit = self.masses(n_e)
            smoothed = resid[rows] @ op.matrix
            dens_sum = unit[rows] @ op.rowsum
        return np.abs(smoothed).sum(axis=1) / (dens_sum + n_g * DENSITY_FLOOR)

    def reference(self, sigma: float, rows: np.ndarray) -> np.ndarray:
        """smECE_sigma of the replicates ``rows`` by relplot's steps (the convolution by FFT)."""
        resid, unit = self.masses(_grid_sizes(sigma)[0])
        smoothed = _fft_smooth(np.concatenate([resid[rows], unit[rows]]), sigma)
        return np.abs(smoothed[: rows.size]).sum(axis=1) / (smoothed[rows.size:] + DENSITY_FLOOR).sum(axis=1)


class _Batch:
    """The replicates of several data sets, stacked (row r is replicate ``local[r]`` of part
    ``owner[r]``), so that one bandwidth search serves them all."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]):
        self.parts = [_Part(f, y, w) for f, y, w in parts]
        sizes = [w.shape[0] for _, _, w in parts]
        self.owner = np.repeat(np.arange(len(sizes)), sizes)
        self.local = np.concatenate([np.arange(b) for b in sizes]) if sizes else np.zeros(0, int)

    def at(self, sigma: float, rows: np.ndarray) -> np.ndarray:
        """smECE_sigma of the stacked rows ``rows`` (the path chosen by ``_operator``)."""
        op = _operator(sigma, rows.size)
        out = np.empty(rows.size)
        owner = self.owner[rows]
        for p in np.unique(owner):
            mine = owner == p
            part, local = self.parts[p], self.local[rows[mine]]
            out[mine] = part.reference(sigma, local) if op is None else part.fast(sigma, local, op)
        return out

    def search(self) -> SmoothEce:
        """relplot's bandwidth search (``search_param``) for every row at once.

        relplot first accepts sigma = 1 if 1 < smECE_1. That never holds (|f - y| <= 1 and the
        operator is non-negative, so sum_g |smoothed residual_g| <= sum_g smoothed mass_g, and
        the density floor makes sum_g dens_g larger), so the search starts at its bisection."""
        n_rows = self.owner.size
        value = np.full(n_rows, np.nan)
        lo = np.zeros(n_rows)  # relplot's `end`: the predicate holds (sigma below its smECE)
        hi = np.ones(n_rows)  # relplot's `start`: it fails; the returned width
        for _ in range(SEARCH_REFINE):
            mid = (hi + lo) / 2
            below = mid < SEARCH_EPS  # relplot's predicate holds there without computing
            for s in np.unique(mid[~below]):
                rows = np.flatnonzero(~below & (mid == s))
                val = self.at(float(s), rows)
                below[rows] = s < val
                # relplot reports smECE at the final upper end, computed when that end was set.
                value[rows[s >= val]] = val[s >= val]
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        at_one = np.flatnonzero(hi == 1.0)  # every step below: the width stays 1
        value[at_one] = self.at(1.0, at_one)
        return SmoothEce(value, hi)


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
    values, or with ``return_sigma`` a ``SmoothEce`` of (B,) values and (B,) bandwidths. Each
    row equals ``relplot.smECE(np.repeat(conf, c), np.repeat(correct, c))``.
    """
    out = smooth_ece_multi([(conf, correct, counts)])[0]
    return out if return_sigma else out.value


def smooth_ece_multi(datasets) -> list[SmoothEce]:
    """``smooth_ece_batch`` for several data sets at once: ``datasets`` is a sequence of
    (conf, correct, counts) triples; returns one ``SmoothEce`` per triple."""
    parts = []
    for conf, correct, counts in datasets:
        f, y = _check(conf, correct)
        parts.append((f, y, _check_counts(counts, f.size)))
    return smooth_ece_counts(parts)


def smooth_ece_counts(parts) -> list[SmoothEce]:
    """``smooth_ece_multi`` without its input checks, for callers that build valid input:
    (conf, 0/1 correct, (B, n) multiplicities with positive row sums) float64 triples."""
    result = _Batch(parts).search()
    bounds = np.cumsum([0] + [w.shape[0] for _, _, w in parts])
    return [SmoothEce(result.value[a:b], result.sigma[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _weights(f: np.ndarray, weights) -> np.ndarray:
    return np.ones((1, f.size)) if weights is None else np.asarray(weights, dtype=float)[None, :]


def smooth_ece(conf, correct, weights=None) -> float:
    """SmoothECE of one data set (relplot.smECE, eps=1e-3); ``weights`` are optional sample
    multiplicities (see the module note)."""
    return smooth_ece_width(conf, correct, weights).value


def smooth_ece_width(conf, correct, weights=None) -> SmoothEce:
    """SmoothECE and its selected bandwidth sigma*, as ``relplot.smECE(..., return_width=True)``."""
    f, _ = _check(conf, correct)
    out = smooth_ece_batch(conf, correct, _weights(f, weights), return_sigma=True)
    return SmoothEce(float(out.value[0]), float(out.sigma[0]))


def smooth_ece_sigma(conf, correct, sigma: float, weights=None) -> float:
    """SmoothECE at a fixed bandwidth ``sigma`` (relplot.smECE_sigma)."""
    f, y = _check(conf, correct)
    if not 0 < sigma <= 1:
        raise ValueError(f"sigma must lie in (0, 1], got {sigma}")
    w = _check_counts(_weights(f, weights), f.size)
    return float(_Batch([(f, y, w)]).at(float(sigma), np.array([0]))[0])
