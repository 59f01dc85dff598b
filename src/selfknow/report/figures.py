"""Figures with one consistent, colour-blind-safe style (Okabe-Ito palette), saved atomically.

Every figure function draws from a DataFrame or arrays (no model, no file other than its PNG
and optional provenance sidecar), labels its axes, titles itself, and returns a
`FigureSummary` of what it drew (taken before the figure is closed) so that tests can check
for empty axes, missing labels and the number of series without decoding the PNG. With a
provenance record, the summary is also kept in the figure's sidecar (key "figure", after the
provenance keys), so that the figures a workflow run produced can be checked after the fact.

Heat-maps use `cividis`, a colour map designed to read the same under colour-vision
deficiency; series beyond the eight Okabe-Ito colours repeat a colour with another marker and
line style rather than fall back to an unsafe palette.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from functools import lru_cache

import numpy as np
import pandas as pd

from selfknow.records import atomic_path

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]
HEATMAP_CMAP = "cividis"
#: the grey of reference lines (perfect calibration, chance)
REFERENCE = "#7f7f7f"


@lru_cache(maxsize=1)
def _pyplot():
    """matplotlib.pyplot on the Agg backend in this module's style, imported on the first
    figure (it takes about a second, which the table jobs need not pay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO), "figure.dpi": 120,
                         "axes.spines.top": False, "axes.spines.right": False, "font.size": 9})
    return plt


@dataclass
class AxesSummary:
    """What one axes shows: labels, and how many artists of each kind carry data."""
    title: str
    xlabel: str
    ylabel: str
    series: list[str]  # labels of the legend entries (one per plotted series)
    n_lines: int
    n_collections: int
    n_images: int
    n_patches: int
    n_texts: int
    has_data: bool
    image_shapes: list[list[int]] = field(default_factory=list)  # (rows, columns) of each image (heat-map)


@dataclass
class FigureSummary:
    path: str
    suptitle: str
    axes: list[AxesSummary] = field(default_factory=list)


def _axes_summary(ax) -> AxesSummary:
    _, labels = ax.get_legend_handles_labels()
    lines = [ln for ln in ax.lines if len(np.atleast_1d(ln.get_xdata())) > 0]
    collections = [c for c in ax.collections if _collection_size(c) > 0]
    images = [im for im in ax.images if np.size(im.get_array()) > 0]
    patches = [p for p in ax.patches if p.get_visible()]
    # a panel title may sit at the left ("(a) ...") or right instead of the centre
    title = next((t for t in (ax.get_title(loc) for loc in ("center", "left", "right")) if t), "")
    return AxesSummary(title=title, xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(), series=list(labels),
                       n_lines=len(lines), n_collections=len(collections), n_images=len(images),
                       n_patches=len(patches), n_texts=len(ax.texts),
                       has_data=bool(lines or collections or images or patches),
                       image_shapes=[list(np.shape(im.get_array())[:2]) for im in images])


def _collection_size(c) -> int:
    offsets = c.get_offsets()
    if offsets is not None and len(offsets):
        return len(offsets)
    return len(c.get_paths())


def figure_summary(fig, path: str | Path = "") -> FigureSummary:
    sup = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    # colour bars are axes too, but they show a scale, not data
    axes = [ax for ax in fig.axes if not hasattr(ax, "_colorbar")]
    return FigureSummary(path=str(path), suptitle=sup, axes=[_axes_summary(ax) for ax in axes])


def save(fig, path: str | Path, *, provenance: dict | None = None) -> FigureSummary:
    """Write `fig` as PNG atomically (and the provenance sidecar `<stem>.json` if given, with
    the figure's summary under "figure" after the provenance keys: report captions include
    the sidecar only up to its "config" key), close it, and return its summary."""
    summary = figure_summary(fig, path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    _pyplot().close(fig)
    if provenance is not None:
        from selfknow.report.provenance import write_sidecar

        write_sidecar({**provenance, "figure": asdict(summary)}, path)
    return summary


def _style(k: int) -> dict:
    """Colour, marker and line style of the k-th series (distinct for up to 8 x 4 series)."""
    return {"color": OKABE_ITO[k % len(OKABE_ITO)], "marker": MARKERS[(k // len(OKABE_ITO)) % len(MARKERS)],
            "linestyle": LINESTYLES[(k // len(OKABE_ITO)) % len(LINESTYLES)]}


def _require(df: pd.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing}; got {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{what}: no rows to plot")


#: LCAE Figure 2: marker area (pt²) of the largest cost efficiency; area is proportional to CE,
#: but never below CE_MIN_AREA, so that a cheap-to-run examinee stays visible
CE_MAX_AREA = 400.0
CE_MIN_AREA = 8.0
#: rows per column of a legend beside the axes: more groups take more columns, not more height
LEGEND_ROWS = 10


def _ce_area(ce: np.ndarray, ce_max: float) -> np.ndarray:
    return np.maximum(CE_MAX_AREA * ce / ce_max, CE_MIN_AREA)


def _ce_key_values(ce: np.ndarray) -> np.ndarray:
    """Up to three round CE values within the data's range for the marker-size key."""
    from matplotlib.ticker import MaxNLocator

    lo, hi = float(ce.min()), float(ce.max())
    ticks = MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
    ticks = ticks[(ticks > 0) & (ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
    if ticks.size == 0:
        return np.array([hi])
    return ticks[np.linspace(0, ticks.size - 1, min(3, ticks.size)).round().astype(int)]


#: the BCE LCAE of stating 0.5 for every item, Figure 2's reference line
LN2 = float(np.log(2))


def ability_lcae_ce(df: pd.DataFrame, path: str | Path, *, title: str,
                    provenance: dict | None = None) -> FigureSummary:
    """LCAE Figure 2 (§IV, "ability, LCAE, and cost efficiency"): one marker per examinee at
    its ability (x) and LCAE (y), marker area proportional to its cost efficiency CE (tokens per
    USD; `CE_MAX_AREA` for the largest, at least `CE_MIN_AREA`). `df` has columns label, theta,
    lcae, ce and optionally group (e.g. the examinee's model; without it every examinee is its
    own group). Colour and marker tell the groups apart, one legend series per group beside
    the axes (`LEGEND_ROWS` a column); the examinees of a group with several (e.g. a model's
    checkpoints) carry their label beside the marker; a second key gives the area of round CE
    values; a dashed line marks the LCAE of the constant 0.5 (ln 2)."""
    from matplotlib.lines import Line2D

    _require(df, ["label", "theta", "lcae", "ce"], "ability_lcae_ce")
    ce = df["ce"].to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(ce) | (ce <= 0))
    if bad.size:
        raise ValueError(f"ability_lcae_ce: cost efficiency must be positive; row {bad[0]} "
                         f"({df['label'].iloc[bad[0]]!r}) has {float(ce[bad[0]])}")
    groups = df["group"] if "group" in df.columns else df["label"]
    fig, ax = _pyplot().subplots(figsize=(5.5, 4))
    ce_max = float(ce.max())
    for k, (group, d) in enumerate(df.groupby(groups, sort=False)):
        st = _style(k)
        ax.scatter(d["theta"], d["lcae"], s=_ce_area(d["ce"].to_numpy(float), ce_max), color=st["color"],
                   marker=st["marker"], alpha=0.8, edgecolor="black", linewidth=0.5, label=str(group), zorder=3)
        if len(d) > 1:
            for r, area in zip(d.itertuples(), _ce_area(d["ce"].to_numpy(float), ce_max)):
                gap = np.sqrt(area) / 2 + 1  # beside the marker's edge, in points
                ax.annotate(str(r.label), (r.theta, r.lcae), xytext=(gap, gap / 2), textcoords="offset points",
                            fontsize=7, color="#333333")
    ax.margins(0.12)
    # the LCAE of stating 0.5 for every item: an examinee above the line does worse than that
    ax.axhline(LN2, color="#888888", linestyle="--", linewidth=0.8, zorder=1, label="_constant 0.5")
    ax.set_xlabel("ability θ (logits, Stage 3)")
    ax.set_ylabel("LCAE (BCE, lower is better; dashed: ln 2)")
    ax.set_title(title)
    # the groups' key shows colour and marker at one size: in the axes, size is CE
    _, labels = ax.get_legend_handles_labels()
    same_size = [Line2D([], [], linestyle="", marker=_style(k)["marker"], markersize=7, alpha=0.8,
                        markerfacecolor=_style(k)["color"], markeredgecolor="black", markeredgewidth=0.5)
                 for k in range(len(labels))]
    ax.legend(same_size, labels, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              ncol=-(-len(labels) // LEGEND_ROWS), title="model", title_fontsize=7)
    # a figure-level key (an axes keeps one legend in its tight bounding box, a figure all of its own)
    key = _ce_key_values(ce)
    sizes = [Line2D([], [], linestyle="", marker="o", markersize=np.sqrt(a), markerfacecolor="none",
                    markeredgecolor="black") for a in _ce_area(key, ce_max)]
    fig.legend(sizes, [f"{v / 1e6:.3g}M" for v in key], fontsize=7, frameon=False, loc="lower left",
               bbox_to_anchor=(1.02, 0.0), bbox_transform=ax.transAxes, title="CE (tokens per USD)",
               title_fontsize=7, labelspacing=1.2, borderpad=0.8)
    return save(fig, path, provenance=provenance)


def _diagonal(ax) -> None:
    """The perfect-calibration diagonal on the unit square (reliability diagrams, LADDER's
    reliability bins)."""
    ax.plot([0, 1], [0, 1], color=REFERENCE, linestyle="--", linewidth=1, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)


# --- LADDER (Figures 4-7) --------------------------------------------------------------------

def _level_order(levels) -> list:
    def key(v):
        s = str(v)
        digits = "".join(ch for ch in s if ch.isdigit())
        return (int(digits) if digits else 1 << 30, s)
    return sorted(pd.unique(levels), key=key)


def ladder_plot(df: pd.DataFrame, path: str | Path, *, title: str, provenance: dict | None = None) -> FigureSummary:
    """LADDER Figure 4: mean session CBF per level (L0 NoMemory .. L4 GT-SelfStats), one line
    per model with ±1 session-bootstrap SE error bars. `df`: model, level, cbf, se."""
    _require(df, ["model", "level", "cbf", "se"], "ladder_plot")
    levels = _level_order(df["level"])
    pos = {lv: i for i, lv in enumerate(levels)}
    fig, ax = _pyplot().subplots(figsize=(6, 4))
    for k, (model, d) in enumerate(df.groupby("model", sort=False)):
        d = d.assign(x=d["level"].map(pos)).sort_values("x")
        st = _style(k)
        ax.errorbar(d["x"], d["cbf"], yerr=d["se"], color=st["color"], marker=st["marker"],
                    linestyle=st["linestyle"], capsize=3, linewidth=1.5, markersize=5, label=str(model))
    ax.set_xticks(range(len(levels)), [str(v) for v in levels])
    ax.set_xlabel("level")
    ax.set_ylabel("mean session CBF (± SE)")
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False, loc="best", ncol=2 if df["model"].nunique() > 6 else 1)
    return save(fig, path, provenance=provenance)


def _annotated_heatmap(ax, values: np.ndarray, rows: list, cols: list, *, vmin: float, vmax: float,
                       digits: int = 2, cbar_label: str | None = "", bracketed: np.ndarray | None = None):
    """`bracketed`: cells (a boolean array of `values`' shape) whose text prints in parentheses."""
    im = ax.imshow(values, cmap=HEATMAP_CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols], rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.spines[:].set_visible(False)
    cmap = _pyplot().get_cmap(HEATMAP_CMAP)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values[i, j]
            if np.isnan(v):
                continue
            r, g, b, _ = cmap((v - vmin) / ((vmax - vmin) or 1.0))
            light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5
            text = f"{v:.{digits}f}"
            ax.text(j, i, f"({text})" if bracketed is not None and bracketed[i, j] else text, ha="center",
                    va="center", fontsize=7, color="black" if light else "white")
    if cbar_label is not None:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label(cbar_label)
    return im


def cbf_matrix(df: pd.DataFrame, path: str | Path, *, title: str, provenance: dict | None = None) -> FigureSummary:
    """LADDER Figure 6: the model x baseline CBF matrix as an annotated heat-map. `df`: model,
    baseline, cbf (one row per cell; rows and columns in order of first appearance)."""
    _require(df, ["model", "baseline", "cbf"], "cbf_matrix")
    if df.duplicated(["model", "baseline"]).any():
        dup = df[df.duplicated(["model", "baseline"], keep=False)].iloc[0]
        raise ValueError(f"cbf_matrix: more than one row for model {dup['model']!r}, baseline {dup['baseline']!r}")
    rows, cols = list(pd.unique(df["model"])), list(pd.unique(df["baseline"]))
    m = df.pivot(index="model", columns="baseline", values="cbf").reindex(index=rows, columns=cols)
    fig, ax = _pyplot().subplots(figsize=(1.2 + 0.75 * len(cols), 1.2 + 0.38 * len(rows)))
    vals = m.to_numpy(float)
    _annotated_heatmap(ax, vals, rows, cols, vmin=float(np.nanmin(vals)), vmax=float(np.nanmax(vals)),
                       cbar_label="CBF")
    ax.set_xlabel("baseline")
    ax.set_ylabel("model")
    ax.set_title(title)
    return save(fig, path, provenance=provenance)


def accuracy_vs_cbf(df: pd.DataFrame, path: str | Path, *, title: str, provenance: dict | None = None) -> FigureSummary:
    """LADDER Figure 5: per model, answer accuracy (x) against profile CBF (y), one marker
    series per estimator, points labelled with the model. `df`: model, estimator, accuracy, cbf."""
    _require(df, ["model", "estimator", "accuracy", "cbf"], "accuracy_vs_cbf")
    fig, ax = _pyplot().subplots(figsize=(6, 4.2))
    for k, (est, d) in enumerate(df.groupby("estimator", sort=False)):
        st = _style(k)
        ax.scatter(d["accuracy"], d["cbf"], color=st["color"], marker=MARKERS[k % len(MARKERS)], s=36,
                   edgecolor="black", linewidth=0.4, label=str(est), zorder=3)
    # model names once, beside the first estimator's point
    for _, r in df.drop_duplicates("model").iterrows():
        ax.annotate(str(r["model"]), (r["accuracy"], r["cbf"]), xytext=(4, 3), textcoords="offset points",
                    fontsize=6, color="#333333")
    ax.set_xlabel("answer accuracy")
    ax.set_ylabel("profile CBF")
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False, loc="best", title="estimator", title_fontsize=7)
    return save(fig, path, provenance=provenance)


def reliability_bins(df: pd.DataFrame, path: str | Path, *, title: str, provenance: dict | None = None) -> FigureSummary:
    """LADDER Figure 7: per model, mean confidence against accuracy in each confidence bin
    (confidence 1 in the last bin), marker area by the bin's answer count. `df`: model,
    bin_lo, bin_hi, confidence, accuracy, count. Series: perfect calibration + one per model."""
    _require(df, ["model", "bin_lo", "bin_hi", "confidence", "accuracy", "count"], "reliability_bins")
    fig, ax = _pyplot().subplots(figsize=(5, 4.6))
    _diagonal(ax)
    ax.set_aspect("equal")
    cmax = float(df["count"].max()) or 1.0
    for k, (model, d) in enumerate(df.groupby("model", sort=False)):
        d = d[d["count"] > 0].sort_values("bin_lo")
        st = _style(k)
        ax.plot(d["confidence"], d["accuracy"], color=st["color"], linestyle=st["linestyle"], linewidth=1.2,
                label=str(model))
        ax.scatter(d["confidence"], d["accuracy"], s=10 + 80 * d["count"] / cmax, color=st["color"],
                   marker=st["marker"], edgecolor="black", linewidth=0.3, zorder=3)
    ax.set_xlabel("mean confidence in bin")
    ax.set_ylabel("accuracy in bin")
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False, loc="upper left", ncol=2 if df["model"].nunique() > 6 else 1)
    return save(fig, path, provenance=provenance)


# --- persistent Figure 3: transfer between checkpoints ---------------------------------------

def auc_limits(*frames: pd.DataFrame) -> tuple[float, float]:
    """The colour scale of Figures 3-4: from the lower of chance (0.5) and the lowest cell to the
    higher of 1 and the highest cell (0.5 to 1 where no cell is defined)."""
    vals = np.concatenate([f.to_numpy(float).ravel() for f in frames])
    vals = vals[~np.isnan(vals)]
    if vals.size == 0:  # e.g. checkpoints that answer nothing right: AUC is undefined everywhere
        return 0.5, 1.0
    return min(0.5, float(vals.min())), max(1.0, float(vals.max()))


def _transfer_panel(ax, matrix: pd.DataFrame, *, vmin: float, vmax: float, title: str,
                    ylabel: str, xlabel: str, colorbar: bool = True, at_chance: pd.DataFrame | None = None):
    im = _annotated_heatmap(ax, matrix.to_numpy(float), list(matrix.index), list(matrix.columns),
                            vmin=vmin, vmax=vmax, cbar_label="AUC" if colorbar else None,
                            bracketed=None if at_chance is None else at_chance.to_numpy(bool))
    ax.set_xlabel(matrix.columns.name or xlabel)
    ax.set_ylabel(matrix.index.name or ylabel)
    ax.set_title(title)
    return im


def transfer_heatmap(matrix: pd.DataFrame, path: str | Path, *, title: str,
                     provenance: dict | None = None) -> FigureSummary:
    """Persistent Figure 3 (left): AUC of a confidence adapter trained on one checkpoint
    (rows) and evaluated on another (columns); forward transfer lies above the diagonal.
    `matrix`: index = training checkpoint, columns = evaluation checkpoint, values AUC.
    The colour scale spans 0.5 to 1 and widens to take in any cell outside it."""
    if matrix.empty:
        raise ValueError("transfer_heatmap: empty matrix")
    vmin, vmax = auc_limits(matrix)
    fig, ax = _pyplot().subplots(figsize=(1.6 + 0.8 * matrix.shape[1], 1.2 + 0.6 * matrix.shape[0]))
    _transfer_panel(ax, matrix, vmin=vmin, vmax=vmax, title=title, ylabel="training checkpoint",
                    xlabel="evaluation checkpoint")
    return save(fig, path, provenance=provenance)


def transfer_heatmap_random_label(transfer: pd.DataFrame, random_label: pd.DataFrame, path: str | Path, *,
                                  title: str, at_chance: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                                  provenance: dict | None = None) -> FigureSummary:
    """Persistent Figure 3, both panels on one colour scale. Left: `transfer` as in
    `transfer_heatmap`. Right: multi-checkpoint training whose second checkpoint gets random
    labels; `random_label` has one row per training pair (index: the pair, e.g.
    "s600 + s900 (random)") and one column per evaluation checkpoint, values AUC: the AUC on
    the random-label checkpoint collapses while the first checkpoint's is kept. `at_chance`:
    per panel a boolean frame of its shape, the cells whose interval includes 0.5, printed in
    parentheses."""
    if transfer.empty or random_label.empty:
        raise ValueError("transfer_heatmap_random_label: empty matrix")
    vmin, vmax = auc_limits(transfer, random_label)
    width = 3.2 + 0.8 * (transfer.shape[1] + random_label.shape[1])
    height = 1.4 + 0.6 * max(transfer.shape[0], random_label.shape[0])
    fig, (left, right) = _pyplot().subplots(1, 2, figsize=(width, height), layout="constrained")
    chance = at_chance or (None, None)
    _transfer_panel(left, transfer, vmin=vmin, vmax=vmax, title="transfer between checkpoints",
                    ylabel="training checkpoint", xlabel="evaluation checkpoint", colorbar=False,
                    at_chance=chance[0])
    im = _transfer_panel(right, random_label, vmin=vmin, vmax=vmax, title="second checkpoint with random labels",
                         ylabel="training pair (second: random labels)", xlabel="evaluation checkpoint",
                         colorbar=False, at_chance=chance[1])
    fig.colorbar(im, ax=[left, right], fraction=0.03, pad=0.02).set_label("AUC (one scale for both panels)")
    fig.suptitle(title)
    return save(fig, path, provenance=provenance)


# --- persistent Figure 2: GCM headroom against oracle training -------------------------------

def gcm_headroom(df: pd.DataFrame, path: str | Path, *, title: str,
                 provenance: dict | None = None) -> FigureSummary:
    """Persistent Figure 2 (§3.2, §B.4): per (model, training dataset), the GCM backbone's
    error rate on the contrast questions (x) against the contrast-set AUC of oracle training
    minus the GCM's (y), with its bootstrap interval where finite. One line per dataset through
    its models (in row order), one marker per model, a zero line: a GCM that knows the answers
    sits near 0, and the gap grows as its backbone knows fewer. A point with an undefined
    coordinate (no contrast set large enough) is named in a note inside the axes. `df`: model,
    dataset, backbone_error_rate, auc_gap, gap_lo, gap_hi."""
    from matplotlib.lines import Line2D

    _require(df, ["model", "dataset", "backbone_error_rate", "auc_gap", "gap_lo", "gap_hi"], "gcm_headroom")
    models = list(pd.unique(df["model"]))
    marker = {m: MARKERS[k % len(MARKERS)] for k, m in enumerate(models)}
    fig, ax = _pyplot().subplots(figsize=(5.5, 4))
    ax.axhline(0.0, color=REFERENCE, linewidth=1)
    for k, (dataset, d) in enumerate(df.groupby("dataset", sort=False)):
        color = _style(k)["color"]
        ax.plot(d["backbone_error_rate"], d["auc_gap"], color=color, linestyle=_style(k)["linestyle"],
                linewidth=1.5, label=str(dataset))
        ci = d[np.isfinite(d["gap_lo"]) & np.isfinite(d["gap_hi"])]
        if len(ci):
            ax.errorbar(ci["backbone_error_rate"], ci["auc_gap"],
                        yerr=[ci["auc_gap"] - ci["gap_lo"], ci["gap_hi"] - ci["auc_gap"]],
                        fmt="none", ecolor=color, capsize=3, linewidth=1)
        for r in d.itertuples():
            ax.scatter(r.backbone_error_rate, r.auc_gap, color=color, marker=marker[r.model], s=60,
                       edgecolor="black", linewidth=0.5, zorder=3)
    undefined = df[~(np.isfinite(df["backbone_error_rate"]) & np.isfinite(df["auc_gap"]))]
    if len(undefined):
        ax.text(0.98, 0.98, "undefined (no contrast set large enough):\n"
                + "\n".join(f"{r.model}, {r.dataset}" for r in undefined.itertuples()),
                transform=ax.transAxes, ha="right", va="top", fontsize=7, color="#333333")
    ax.margins(0.15)
    ax.set_xlabel("error rate of the GCM backbone on contrast questions")
    ax.set_ylabel("contrast-set AUC gap: oracle − GCM")
    ax.set_title(title)
    datasets = ax.legend(fontsize=7, frameon=False, loc="upper left", title="dataset", title_fontsize=7)
    ax.add_artist(datasets)
    ax.legend([Line2D([], [], linestyle="", marker=marker[m], markerfacecolor="white", markeredgecolor="black")
               for m in models], models, fontsize=7, frameon=False, loc="lower right", title="model",
              title_fontsize=7)
    return save(fig, path, provenance=provenance)


# --- LADDER Figures 9 and 11: bars per model, one panel per quantity -----------------------------

def bar_panels(df: pd.DataFrame, path: str | Path, *, title: str, ylabels: dict | None = None,
               provenance: dict | None = None) -> FigureSummary:
    """Panels stacked vertically (in order of first appearance of `panel`), each with one group
    of bars per model (models in the panel's order) and one bar per series, a series keeping
    its colour across panels; a legend when a panel has more than one series (series "" is a
    single unnamed one). NaN values draw no bar. `df`: panel, model, series, value; `ylabels`:
    panel -> y-axis label (default: the panel's name after its "(a) " tag)."""
    _require(df, ["panel", "model", "series", "value"], "bar_panels")
    panels = list(pd.unique(df["panel"]))
    colour = {s: OKABE_ITO[k % len(OKABE_ITO)] for k, s in enumerate(pd.unique(df["series"]))}
    fig, axes = _pyplot().subplots(len(panels), 1, figsize=(8, 2.3 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        d = df[df["panel"] == panel]
        models, series = list(pd.unique(d["model"])), list(pd.unique(d["series"]))
        width = 0.8 / len(series)
        for k, s in enumerate(series):
            v = d[d["series"] == s].set_index("model")["value"].reindex(models).to_numpy(float)
            x = np.arange(len(models)) - 0.4 + width * (k + 0.5)
            ok = np.isfinite(v)
            ax.bar(x[ok], v[ok], width=width, color=colour[s], edgecolor="black", linewidth=0.4,
                   label=str(s) if s != "" else None)
        ax.set_xticks(range(len(models)), [str(m) for m in models], rotation=20, ha="right", fontsize=7)
        ax.set_title(str(panel), fontsize=9, loc="left")
        ax.set_xlabel("model")
        ax.set_ylabel((ylabels or {}).get(panel, str(panel).split(") ", 1)[-1]))
        if len(series) > 1:
            ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save(fig, path, provenance=provenance)
