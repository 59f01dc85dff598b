"""Reliability diagrams (persistent §2, §A.2): binned accuracy against mean confidence and the
SmoothECE curve with its bootstrap band, drawn as relplot 1.0.3 draws them, in the style of
`selfknow.report.figures` (one method: `reliability_diagram`; one panel per method:
`reliability_grid`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .figures import OKABE_ITO, REFERENCE, FigureSummary, _diagonal, _pyplot, _require, save

DENSITY_FLOOR = 1e-4  # relplot BaseKernelMixin.smooth(eps=1e-4), as in selfknow.stats.smooth_ece
MESH_POINTS = 200  # relplot config.plot_mesh_pts


def _grid_points(sigma: float) -> int:
    return max(2000, round(20 / sigma)) // 2 + 1


def _spread(conf: np.ndarray, n_grid: int):
    """(n, E) sparse matrix spreading each sample linearly onto the two nearest grid points
    of linspace(0, 1, E) (relplot smooth_round_to_grid)."""
    import scipy.sparse as sp

    idx = (conf * (n_grid - 1)).astype(int).clip(0, n_grid - 2)
    frac = conf * (n_grid - 1) - idx
    n = conf.size
    return sp.csr_matrix((np.concatenate([1 - frac, frac]),
                          (np.concatenate([np.arange(n), np.arange(n)]), np.concatenate([idx, idx + 1]))),
                         shape=(n, n_grid))


def _reflected_smooth(values: np.ndarray, sigma: float, mesh: np.ndarray) -> np.ndarray:
    """Rows of grid masses convolved with the Gaussian of width sigma, the data reflected at 0
    and 1, then linearly interpolated onto `mesh` (relplot ReflectedGaussianKernel.apply)."""
    from scipy.signal import fftconvolve

    n_grid = values.shape[1]
    t = np.linspace(0, 1, n_grid)
    ker = np.exp(-(t - 0.5) ** 2 / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)
    e = np.arange(3 * n_grid - 2)
    src = np.where(e < n_grid - 1, n_grid - 1 - e, np.where(e <= 2 * n_grid - 2, e - (n_grid - 1), 3 * n_grid - 3 - e))
    full = fftconvolve(values[:, src], ker[None, :], mode="valid", axes=1)
    smoothed = full[:, n_grid // 2: n_grid // 2 + n_grid]
    idx = (mesh * (n_grid - 1)).astype(int).clip(0, n_grid - 2)
    frac = mesh * (n_grid - 1) - idx
    return smoothed[:, idx] * (1 - frac) + smoothed[:, idx + 1] * frac


def smooth_reliability(conf, correct, *, sigma: float | None = None, n_boot: int = 200, seed: int = 0,
                       level: float = 0.95, mesh_points: int = MESH_POINTS) -> dict:
    """The SmoothECE reliability curve (Blasiok & Nakkiran 2024) with a bootstrap band.

    The curve is the Nadaraya-Watson estimate of E[correct | confidence = t] with the kernel
    SmoothECE uses (a Gaussian reflected at 0 and 1, on relplot's grid, density floor 1e-4)
    at SmoothECE's own bandwidth sigma* (`selfknow.stats.smooth_ece.smooth_ece_width`), so the
    plotted curve is the one whose distance from the diagonal the SmoothECE value measures;
    it equals relplot's `KernelSmoother(ReflectedGaussianKernel(sigma*))` prediction. The band
    is the pointwise `level` percentile interval over `n_boot` resamples of the (confidence,
    correct) pairs at the same bandwidth (relplot's diagram does the same, 200 resamples;
    relplot then draws the resamples' mean as its main line, we draw the full-data curve).

    Returns mesh, mu, lower, upper, smece, sigma, density (the smoothed sample density).
    """
    from selfknow.stats.smooth_ece import smooth_ece_width

    f = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=float)
    value, sigma_star = smooth_ece_width(f, y)  # validates shapes, ranges and 0/1 labels
    sigma = sigma_star if sigma is None else float(sigma)
    mesh = np.linspace(0, 1, mesh_points)
    n_grid = _grid_points(sigma)
    spread = _spread(f, n_grid)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(f.size, np.full(f.size, 1 / f.size), size=n_boot).astype(float) if n_boot else \
        np.empty((0, f.size))
    weights = np.vstack([np.ones((1, f.size)), counts])  # row 0: the data itself
    num = _reflected_smooth(np.asarray((spread.T @ (weights * y).T).T), sigma, mesh)
    den = _reflected_smooth(np.asarray((spread.T @ weights.T).T), sigma, mesh)
    curves = num / (den + DENSITY_FLOOR)
    alpha = (1 - level) / 2
    lower, upper = (np.quantile(curves[1:], [alpha, 1 - alpha], axis=0) if n_boot else (curves[0], curves[0]))
    return {"mesh": mesh, "mu": curves[0], "lower": lower, "upper": upper, "smece": value, "sigma": sigma,
            "density": den[0] / f.size}


def binned_reliability(conf, correct, n_bins: int = 10) -> pd.DataFrame:
    """Per equal-width bin of [0, 1] (a confidence of 1 in the last bin, as
    `selfknow.stats.classification.binned_ece`): bounds, count, mean confidence, accuracy.
    Empty bins are dropped."""
    f = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=float)
    idx = np.minimum((f * n_bins).astype(int), n_bins - 1)
    count = np.bincount(idx, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=f, minlength=n_bins)
    acc_sum = np.bincount(idx, weights=y, minlength=n_bins)
    keep = count > 0
    lo = np.arange(n_bins) / n_bins
    return pd.DataFrame({"bin_lo": lo[keep], "bin_hi": lo[keep] + 1 / n_bins, "count": count[keep],
                         "confidence": conf_sum[keep] / count[keep], "accuracy": acc_sum[keep] / count[keep]})


def _check_conf(f: np.ndarray, y: np.ndarray, what: str) -> None:
    if f.ndim != 1 or f.shape != y.shape or f.size == 0:
        raise ValueError(f"{what}: confidence and correctness must be 1-D of one non-zero length, "
                         f"got {f.shape} and {y.shape}")
    bad = np.flatnonzero(~np.isfinite(f) | (f < 0) | (f > 1))
    if bad.size:
        raise ValueError(f"{what}: confidence must lie in [0, 1]; row {bad[0]} is {f[bad[0]]!r}")
    bad = np.flatnonzero((y != 0) & (y != 1))
    if bad.size:
        raise ValueError(f"{what}: correctness must be 0/1; row {bad[0]} is {y[bad[0]]!r}")


#: relplot 1.0.3 (`diagrams.plot_rel_diagram`, the default `simple_main_line=False`) draws the
#: smoothed curve as dots on this many mesh points, interpolated from the 200-point curve
CURVE_MESH_POINTS = 1000
#: an opacity below one 8-bit step cannot change a pixel of the PNG: such dots and band
#: segments are left out rather than drawn invisibly
MIN_ALPHA = 1 / 255


def density_curve_style(density: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Opacity and area (pt²) of the smoothed curve's dot at each mesh point, from the kernel
    density of the confidences there: relplot's rule (`diagrams.plot_rel_diagram`,
    `get_sizes_from_density` and the colours after it). Half the density d sets the area,
    200·(d/2)² below d/2 = 1 and 200·√(d/2) above, and the opacity 0.3·(d/2) clipped to 1
    (relplot halves its density array in place before it computes the colours, so the
    opacity it draws is 0.3·d/2, not 0.3·d). Where the confidences have no kernel mass the
    curve, a ratio of two vanishing kernel sums, fades out instead of dropping to 0."""
    half = np.clip(np.asarray(density, dtype=float), 0, None) / 2  # FFT round-off can leave -1e-17
    area = 200 * np.where(half < 1, half**2, np.sqrt(half))
    return np.clip(0.3 * half, 0, 1), area


def band_alpha(density: np.ndarray) -> np.ndarray:
    """Opacity of the bootstrap band between consecutive mesh points: 0.6 x the density at the
    segment's left end over the largest density (relplot `plot_rel_diagram`, its confidence
    bands)."""
    d = np.asarray(density, dtype=float)
    return 0.6 * d[:-1] / d.max()


def _smooth_curve(ax, sm: dict, *, n_boot: int):
    """The SmoothECE band and curve of `smooth_reliability` on `ax`, each faded by the kernel
    density of the confidences as relplot fades them (`band_alpha`, `density_curve_style`),
    parts that cannot show in the PNG left out; returns legend proxies for both."""
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.path import Path as MplPath

    t, lower, upper = sm["mesh"], sm["lower"], sm["upper"]
    alpha = band_alpha(sm["density"])
    # the band's outline, filled by an image of one column per mesh segment at that segment's
    # opacity (abutting translucent polygons would leave seams between them)
    band = ax.fill_between(t, lower, upper, facecolor="none", linewidth=0,
                           label=f"95 % bootstrap band ({n_boot} resamples)")
    fill = np.zeros((1, alpha.size, 4))
    fill[0] = to_rgba(REFERENCE)
    fill[0, :, 3] = np.where(alpha >= MIN_ALPHA, alpha, 0)
    image = ax.imshow(fill, extent=(0, 1, 0, 1), origin="lower", aspect="auto", interpolation="nearest")
    image.set_clip_path(MplPath.make_compound_path(*band.get_paths()), ax.transData)
    x = np.linspace(0, 1, CURVE_MESH_POINTS)
    dot_alpha, area = density_curve_style(np.interp(x, t, sm["density"]))
    keep = dot_alpha >= MIN_ALPHA
    rgb = np.array(to_rgba(OKABE_ITO[0]))[:3]
    curve = ax.scatter(x[keep], np.interp(x[keep], t, sm["mu"]), marker=".", s=area[keep], linewidths=0,
                       c=[(*rgb, a) for a in dot_alpha[keep]], zorder=2,
                       label=f"smoothed, SmoothECE {sm['smece']:.3f} (σ={sm['sigma']:.3f})")
    return {band: Patch(color=REFERENCE, alpha=0.6), curve: Line2D([], [], color=OKABE_ITO[0], linewidth=2)}


def _reliability_axes(ax, f: np.ndarray, y: np.ndarray, *, n_bins: int, smooth: bool, n_boot: int, seed: int) -> None:
    """Diagonal, SmoothECE curve with its band (if `smooth`) and binned points on `ax`."""
    from selfknow.stats.classification import binned_ece

    _diagonal(ax)
    proxies = _smooth_curve(ax, smooth_reliability(f, y, n_boot=n_boot, seed=seed), n_boot=n_boot) if smooth else {}
    bins = binned_reliability(f, y, n_bins)
    area = 15 + 120 * bins["count"] / bins["count"].max()
    ax.scatter(bins["confidence"], bins["accuracy"], s=area, color=OKABE_ITO[1], edgecolor="black",
               linewidth=0.5, zorder=3, label=f"{n_bins} bins, ECE {binned_ece(f, y, n_bins):.3f}")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend([proxies.get(h, h) for h in handles], labels, fontsize=7, loc="upper left", frameon=False)


def reliability_diagram(conf, correct, path: str | Path, *, title: str, n_bins: int = 10, smooth: bool = True,
                        n_boot: int = 200, seed: int = 0, provenance: dict | None = None) -> FigureSummary:
    """Reliability diagram of one confidence method: binned accuracy against mean confidence
    (marker area by bin count, binned ECE in the legend) and, with `smooth`, the SmoothECE
    curve with its bootstrap band (persistent §2, §A.2; see `smooth_reliability`), both faded
    by the kernel density of the confidences as relplot draws them (`density_curve_style`,
    `band_alpha`), so that neither is shown where there are no answers. Below, the
    distribution of confidences.

    Series: perfect calibration, binned points, and with `smooth` the curve and its band."""
    f = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=float)
    _check_conf(f, y, "reliability_diagram")
    fig, (ax, hist) = _pyplot().subplots(2, 1, figsize=(4.4, 5.4), height_ratios=[4, 1], sharex=True,
                                   gridspec_kw={"hspace": 0.08})
    _reliability_axes(ax, f, y, n_bins=n_bins, smooth=smooth, n_boot=n_boot, seed=seed)
    ax.set_ylabel("accuracy (fraction correct)")
    ax.set_title(title)
    hist.hist(f, bins=np.linspace(0, 1, 21), color=REFERENCE, alpha=0.8)
    hist.set_xlabel("confidence")
    hist.set_ylabel("answers")
    return save(fig, path, provenance=provenance)


def reliability_grid(df: pd.DataFrame, path: str | Path, *, title: str, n_bins: int = 10, smooth: bool = True,
                     n_boot: int = 200, seed: int = 0, ncols: int = 4,
                     provenance: dict | None = None) -> FigureSummary:
    """Reliability diagrams of several methods (or checkpoints) side by side on shared axes,
    one panel per value of `panel` in order of appearance, each as in `reliability_diagram`
    (without the histogram). `df`: panel, confidence, correct."""
    _require(df, ["panel", "confidence", "correct"], "reliability_grid")
    panels = list(pd.unique(df["panel"]))
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = _pyplot().subplots(nrows, ncols, figsize=(3.3 * ncols, 3.4 * nrows), sharex=True, sharey=True,
                             squeeze=False, layout="constrained")
    for k, name in enumerate(panels):
        ax = axes.flat[k]
        d = df[df["panel"] == name]
        f, y = d["confidence"].to_numpy(float), d["correct"].to_numpy(float)
        _check_conf(f, y, f"reliability_grid panel {name!r}")
        _reliability_axes(ax, f, y, n_bins=n_bins, smooth=smooth, n_boot=n_boot, seed=seed)
        ax.set_title(f"{name} (n={len(d)})")
        ax.set_xlabel("confidence")
        ax.set_ylabel("accuracy")
    for ax in axes.flat[len(panels):]:
        ax.remove()
    fig.suptitle(title)
    return save(fig, path, provenance=provenance)
