"""Figures: the SmoothECE curve against relplot, the binned points against binned_ece, and every
figure function on synthetic data: a non-empty PNG, labelled, non-empty axes, the expected
number of series, and a sidecar when provenance is given."""
from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from selfknow.report import figures as F
from selfknow.report import reliability as RL
from selfknow.stats.classification import binned_ece

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _data(n: int, seed: int = 0, power: float = 1.0):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0, 1, n)
    y = (rng.uniform(size=n) < f**power).astype(float)
    return f, y


def _check_png(path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000, f"{path} is not a real PNG"


def _check_labelled(summary: F.FigureSummary, n_axes: int) -> None:
    assert len(summary.axes) == n_axes
    for ax in summary.axes:
        assert ax.has_data, f"empty axes in {summary.path}"
        assert ax.xlabel or ax.ylabel
    assert any(ax.title for ax in summary.axes) or summary.suptitle


# --- the smoothed curve and the binned points ------------------------------------------------

@pytest.mark.parametrize("n,power", [(300, 1.0), (2000, 1.7)])
def test_smooth_curve_is_relplots_kernel_smoother_at_smoothece_bandwidth(n, power):
    relplot = pytest.importorskip("relplot")
    from relplot.estimators import KernelSmoother
    from relplot.kernels import ReflectedGaussianKernel

    f, y = _data(n, seed=n, power=power)
    sm = RL.smooth_reliability(f, y, n_boot=0)
    value, sigma = relplot.smECE(f, y, return_width=True)
    assert sm["smece"] == pytest.approx(value, abs=1e-9)
    assert sm["sigma"] == pytest.approx(sigma, abs=1e-12)
    ref = KernelSmoother(ReflectedGaussianKernel(sigma)).fit(f.reshape(-1, 1), y).predict(sm["mesh"].reshape(-1, 1))
    np.testing.assert_allclose(sm["mu"], ref, atol=1e-10)


def test_smooth_curve_follows_the_truth_and_the_band_narrows_with_more_data():
    # SmoothECE's bandwidth is its own value, so a badly calibrated model gets a wide kernel;
    # at a fixed narrow bandwidth the curve recovers the true reliability E[y | f] = f^2
    f, y = _data(20000, seed=3, power=2.0)
    fixed = RL.smooth_reliability(f, y, sigma=0.03, n_boot=0)
    inner = (fixed["mesh"] > 0.1) & (fixed["mesh"] < 0.9)
    assert np.max(np.abs(fixed["mu"][inner] - fixed["mesh"][inner] ** 2)) < 0.03
    f, y = _data(20000, seed=3, power=1.0)  # calibrated: the curve is the diagonal
    sm = RL.smooth_reliability(f, y, n_boot=100, seed=1)
    assert sm["sigma"] < 0.05
    assert np.max(np.abs(sm["mu"][inner] - sm["mesh"][inner])) < 0.05  # f^2 is up to 0.25 away
    assert np.mean((sm["lower"] <= sm["mu"] + 1e-12) & (sm["mu"] <= sm["upper"] + 1e-12)) > 0.95
    small = RL.smooth_reliability(f[:500], y[:500], n_boot=100, seed=1)
    assert np.mean(sm["upper"] - sm["lower"]) < 0.5 * np.mean(small["upper"] - small["lower"])
    again = RL.smooth_reliability(f[:500], y[:500], n_boot=100, seed=1)
    np.testing.assert_array_equal(again["lower"], small["lower"])  # the seed fixes the band


def test_smooth_curve_of_an_overconfident_model_sits_below_the_diagonal():
    rng = np.random.default_rng(5)
    f = rng.uniform(0.8, 1.0, 3000)
    y = (rng.uniform(size=3000) < 0.5).astype(float)
    sm = RL.smooth_reliability(f, y, n_boot=0)
    at = (sm["mesh"] > 0.85) & (sm["mesh"] < 0.95)
    assert np.all(np.abs(sm["mu"][at] - 0.5) < 0.1)


def test_binned_points_reproduce_binned_ece_with_confidence_one_in_the_last_bin():
    f, y = _data(1000, seed=7, power=1.5)
    f[:5] = 1.0
    b = RL.binned_reliability(f, y, n_bins=10)
    assert b["count"].sum() == len(f)
    ece = float(np.sum(b["count"] / len(f) * np.abs(b["accuracy"] - b["confidence"])))
    assert ece == pytest.approx(binned_ece(f, y, 10), abs=1e-12)
    assert b["bin_hi"].max() == pytest.approx(1.0)
    last = b[b["bin_lo"] == 0.9].iloc[0]
    assert last["count"] == np.sum(f >= 0.9)


def test_the_curve_and_band_fade_with_the_kernel_density_exactly_as_relplot_draws_them():
    """Calibrated confidences only in [0.2, 0.6]: the kernel-smoothed curve falls to 0
    past the data (a ratio of two vanishing kernel sums); relplot fades it there by the kernel
    density, and so must we: same opacity and area per dot and band opacity per segment as
    relplot's own `plot_rel_diagram` on the same curve, nothing drawn where relplot's opacity is
    below one 8-bit step."""
    relplot = pytest.importorskip("relplot")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(5)
    f = rng.uniform(0.2, 0.6, 300)
    y = (rng.uniform(size=300) < f).astype(float)
    sm = RL.smooth_reliability(f, y, n_boot=50, seed=0)
    assert sm["mu"][sm["mesh"] > 0.95].max() < 0.1  # the plunge a reader would take for a finding
    ref = relplot.prepare_rel_diagram(f, y, plot_confidence_band=False, report_CE=False, kde_bandwidth=sm["sigma"])
    np.testing.assert_allclose(sm["density"], ref["density"], rtol=1e-9, atol=1e-12)
    fig, ax = plt.subplots()
    relplot.plot_rel_diagram({**ref, "mu": sm["mu"], "lower": sm["lower"], "upper": sm["upper"], "bags": []},
                             fig=fig, ax=ax, use_default_style=False, plot_density_ticks=False)
    dots = max(ax.collections, key=lambda c: len(c.get_offsets()))
    ref_x, ref_alpha, ref_area = dots.get_offsets()[:, 0], dots.get_facecolors()[:, 3], dots.get_sizes()
    ref_band = np.array([c.get_alpha() for c in ax.collections if c is not dots])
    plt.close(fig)

    fig, ax = plt.subplots()
    RL._reliability_axes(ax, f, y, n_bins=10, smooth=True, n_boot=50, seed=0)
    curve = next(c for c in ax.collections if c.get_label().startswith("smoothed"))
    band = ax.images[0].get_array()[0, :, 3]
    plt.close(fig)
    x = curve.get_offsets()[:, 0]
    drawn = np.isin(ref_x, x)
    assert drawn.sum() == x.size
    np.testing.assert_allclose(curve.get_facecolors()[:, 3], ref_alpha[drawn], rtol=1e-12)
    np.testing.assert_allclose(curve.get_sizes(), ref_area[drawn], rtol=1e-12)
    assert np.all(ref_alpha[~drawn] < 1 / 255) and np.all(ref_alpha[drawn] >= 1 / 255)
    # past the data's kernel mass nothing is drawn, and what is drawn does not plunge
    assert 0.05 < x.min() < 0.2 and 0.6 < x.max() < 0.75
    assert curve.get_offsets()[:, 1].min() > 0.1
    assert band.size == ref_band.size == sm["mesh"].size - 1
    np.testing.assert_allclose(band, np.where(ref_band >= 1 / 255, ref_band, 0), rtol=1e-12)
    assert band[sm["mesh"][:-1] > 0.95].max() == 0


# --- every figure ------------------------------------------------------------------------------

def test_reliability_diagram(tmp_path):
    f, y = _data(800, seed=2, power=1.4)
    path = tmp_path / "rel.png"
    s = RL.reliability_diagram(f, y, path, title="wm-small, world_qa", n_boot=50, provenance={"config_hash": "abc"})
    _check_png(path)
    _check_labelled(s, 2)
    main = s.axes[0]
    assert main.series[0] == "perfect calibration"
    assert len(main.series) == 4  # diagonal, band, curve, bins
    assert any("SmoothECE" in lab for lab in main.series) and any("ECE" in lab for lab in main.series)
    # lines: the diagonal; collections: the band's outline, the curve's dots, the bins; the band's
    # density-faded fill is an image clipped to the outline
    assert main.n_lines == 1 and main.n_collections == 3 and main.n_images == 1
    assert s.axes[1].xlabel == "confidence" and s.axes[1].n_patches == 20
    # the sidecar keeps the provenance and, after it, what the figure drew
    assert json.loads((tmp_path / "rel.json").read_text()) == {"config_hash": "abc", "figure": asdict(s)}
    s2 = RL.reliability_diagram(f, y, tmp_path / "rel2.png", title="binned only", smooth=False)
    assert len(s2.axes[0].series) == 2
    with pytest.raises(ValueError, match="one non-zero length"):
        RL.reliability_diagram(f, y[:-1], tmp_path / "bad.png", title="bad")


def test_ladder_plot_has_one_series_per_model_over_the_five_levels(tmp_path):
    models = [f"m{i}" for i in range(11)]  # more models than colours: styles must still differ
    df = pd.DataFrame([(m, f"L{lv}", 0.5 + 0.08 * lv + 0.005 * k, 0.01) for k, m in enumerate(models)
                       for lv in [3, 0, 4, 1, 2]], columns=["model", "level", "cbf", "se"])
    s = F.ladder_plot(df, tmp_path / "figure4.png", title="Figure 4")
    _check_png(tmp_path / "figure4.png")
    _check_labelled(s, 1)
    assert s.axes[0].series == models
    assert s.axes[0].xlabel == "level" and "CBF" in s.axes[0].ylabel
    styles = {(F._style(k)["color"], F._style(k)["marker"], F._style(k)["linestyle"]) for k in range(len(models))}
    assert len(styles) == len(models)
    with pytest.raises(ValueError, match="se"):
        F.ladder_plot(df.drop(columns="se"), tmp_path / "x.png", title="x")


def test_cbf_matrix_annotates_every_cell(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame([(m, b, rng.uniform(0.5, 1)) for m in ["a", "b", "c"]
                       for b in ["NoMemory", "ZS", "LSA", "Count", "OraclePDC"]], columns=["model", "baseline", "cbf"])
    s = F.cbf_matrix(df, tmp_path / "figure6.png", title="Figure 6")
    _check_png(tmp_path / "figure6.png")
    _check_labelled(s, 1)  # the colour bar is not counted as a data axes
    assert s.axes[0].n_images == 1 and s.axes[0].n_texts == 15
    with pytest.raises(ValueError, match="more than one row"):
        F.cbf_matrix(pd.concat([df, df.iloc[:1]]), tmp_path / "dup.png", title="dup")


def test_accuracy_vs_cbf_has_one_series_per_estimator(tmp_path):
    rng = np.random.default_rng(1)
    df = pd.DataFrame([(m, e, acc, rng.uniform(0.6, 0.95)) for m, acc in [("a", 0.4), ("b", 0.7), ("c", 0.8)]
                       for e in ["ZS", "LSA", "EM-Joint", "Count"]], columns=["model", "estimator", "accuracy", "cbf"])
    s = F.accuracy_vs_cbf(df, tmp_path / "figure5.png", title="Figure 5")
    _check_png(tmp_path / "figure5.png")
    _check_labelled(s, 1)
    assert s.axes[0].series == ["ZS", "LSA", "EM-Joint", "Count"]
    assert s.axes[0].n_texts == 3  # one name per model


def test_reliability_bins_has_the_diagonal_and_one_series_per_model(tmp_path):
    frames = []
    for k, m in enumerate(["a", "b", "c"]):
        f, y = _data(400, seed=k)
        frames.append(RL.binned_reliability(f, y).assign(model=m))
    s = F.reliability_bins(pd.concat(frames), tmp_path / "figure7.png", title="Figure 7")
    _check_png(tmp_path / "figure7.png")
    _check_labelled(s, 1)
    assert s.axes[0].series == ["perfect calibration", "a", "b", "c"]
    assert s.axes[0].n_collections == 3


def _transfer(ck, rng):
    return pd.DataFrame(rng.uniform(0.55, 0.9, (len(ck), len(ck))), index=pd.Index(ck, name="training checkpoint"),
                        columns=pd.Index(ck, name="evaluation checkpoint"))


def test_transfer_heatmap_and_its_random_label_panel(tmp_path):
    rng = np.random.default_rng(2)
    ck = ["step00900", "step01200", "step01500", "step01800"]
    m = _transfer(ck, rng)
    s = F.transfer_heatmap(m, tmp_path / "figure3_left.png", title="Transfer, wm-small, world_qa")
    _check_png(tmp_path / "figure3_left.png")
    _check_labelled(s, 1)
    assert s.axes[0].n_images == 1 and s.axes[0].n_texts == 16
    assert s.axes[0].ylabel == "training checkpoint"
    rl = pd.DataFrame(rng.uniform(0.4, 0.9, (3, 4)), columns=ck,
                      index=[f"{a} + {b} (random)" for a, b in zip(ck, ck[1:])])
    s2 = F.transfer_heatmap_random_label(m, rl, tmp_path / "figure3.png", title="Figure 3, wm-small",
                                         provenance={"config_hash": "h"})
    _check_png(tmp_path / "figure3.png")
    _check_labelled(s2, 2)
    assert s2.suptitle == "Figure 3, wm-small"
    assert [a.n_texts for a in s2.axes] == [16, 12]
    assert (tmp_path / "figure3.json").exists()
    # checkpoints that answer nothing right have no AUC: the map is drawn (empty cells), not refused
    s3 = F.transfer_heatmap(m * np.nan, tmp_path / "nan.png", title="x")
    assert (tmp_path / "nan.png").stat().st_size > 0 and s3.axes[0].n_texts >= 0


def test_gcm_headroom_has_one_line_per_dataset_a_marker_per_model_and_its_intervals(tmp_path):
    models = ["olmo3-7b", "marin-8b", "olmo3-32b"]
    df = pd.DataFrame({"model": models * 2, "dataset": ["triviaqa"] * 3 + ["jeopardy"] * 3,
                       "backbone_error_rate": [0.2, 0.3, 0.35, 0.15, 0.25, 0.3],
                       "auc_gap": [0.0, 0.1, 0.12, 0.01, 0.09, 0.08],
                       "gap_lo": [-0.02, 0.08, 0.1, -0.01, 0.07, np.nan],
                       "gap_hi": [0.02, 0.12, 0.14, 0.03, 0.11, np.nan]})
    s = F.gcm_headroom(df, tmp_path / "figure2.png", title="Figure 2", provenance={"config_hash": "h"})
    _check_png(tmp_path / "figure2.png")
    _check_labelled(s, 1)
    ax = s.axes[0]
    assert ax.series == ["triviaqa", "jeopardy"]
    # the zero line, one line per dataset and per dataset the two cap lines of its intervals; a
    # point per (model, dataset) and one interval collection per dataset (jeopardy's third
    # point has none)
    assert ax.n_lines == 1 + 2 + 2 * 2 and ax.n_collections == 6 + 2
    assert "oracle − GCM" in ax.ylabel and "backbone" in ax.xlabel
    assert json.loads((tmp_path / "figure2.json").read_text())["figure"]["axes"][0]["series"] == ax.series
    assert ax.n_texts == 0
    # a point without a contrast set is named, not drawn
    s2 = F.gcm_headroom(df.assign(backbone_error_rate=[np.nan] + [0.3] * 5), tmp_path / "nan.png", title="x")
    assert s2.axes[0].n_texts == 1 and s2.axes[0].series == ["triviaqa", "jeopardy"]
    with pytest.raises(ValueError, match="missing columns"):
        F.gcm_headroom(df.drop(columns="gap_lo"), tmp_path / "x.png", title="x")


def test_lcae_figure2_has_one_series_per_model_ce_as_area_and_a_bounded_legend(tmp_path, monkeypatch):
    """Stage 3 of two priced models (one with three checkpoints) and an unpriced one, through
    `figure2_frame`: one marker per examinee, one legend series per model, the checkpoints
    labelled, marker area proportional to CE (paper: CE = 10^6 / mean price per million tokens),
    and with twenty models a legend of at most LEGEND_ROWS rows and a CE key of three sizes."""
    from selfknow.protocols.lcae.tables import figure2_frame

    kept = []  # the figures as drawn, before `save` closes them
    real_save = F.save
    monkeypatch.setattr(F, "save", lambda fig, *a, **k: kept.append(fig) or real_save(fig, *a, **k))
    rows = [(m, c, cond, rep, th + 0.1 * rep, lc) for m, c, th, lc in
            [("big", "final", 1.2, 0.4), ("small", "s1", -0.5, 0.9), ("small", "s2", 0.0, 0.7),
             ("small", "s3", 0.4, 0.6), ("free", "final", 0.3, 0.5)]
            for cond in ("ids_dpr", "base") for rep in (0, 1)]
    stage3 = pd.DataFrame(rows, columns=["model", "checkpoint", "condition", "repeat", "theta", "lcae"])
    f2 = figure2_frame(stage3, {"big": [1.0, 3.0], "small": [0.1, 0.3]})
    assert sorted(f2["group"]) == ["big", "small", "small", "small"]  # no price: no CE, no point
    assert f2.loc[f2["group"] == "big", "ce"].item() == pytest.approx(0.5e6)
    s = F.ability_lcae_ce(f2, tmp_path / "figure2.png", title="Figure 2", provenance={"config_hash": "h"})
    _check_png(tmp_path / "figure2.png")
    _check_labelled(s, 1)
    side = json.loads((tmp_path / "figure2.json").read_text())["figure"]["axes"][0]
    assert side["series"] == ["big", "small"] and side["n_texts"] == 3  # s1-s3 named; big alone needs no name
    ax = kept[-1].axes[0]
    area = {c.get_label(): c.get_sizes() for c in ax.collections}
    assert area["small"] == pytest.approx([F.CE_MAX_AREA] * 3) and area["big"] == pytest.approx([F.CE_MAX_AREA / 10])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["big", "small"]
    # the constant 0.5's LCAE, ln 2, as a dashed line across the axes
    (line,) = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert line.get_ydata()[0] == pytest.approx(np.log(2)) and "ln 2" in ax.get_ylabel()

    rng = np.random.default_rng(0)
    names = [f"model-{i:02d}" for i in range(20)]
    many = pd.DataFrame({"group": names, "label": names, "theta": rng.normal(0, 1, 20),
                         "lcae": rng.uniform(0.8, 2.5, 20), "ce": rng.uniform(0.1, 8.73, 20) * 1e6})
    s = F.ability_lcae_ce(many, tmp_path / "many.png", title="Figure 2, twenty models")
    assert s.axes[0].series == names and s.axes[0].n_texts == 0
    legend, (key,) = kept[-1].axes[0].get_legend(), kept[-1].legends
    assert legend._ncols == 2 and len(legend.get_texts()) == 20  # two columns of ten rows
    assert 1 <= len(key.get_texts()) <= 3 and all(t.get_text().endswith("M") for t in key.get_texts())
    # without a group column every examinee is its own group (one series each)
    s = F.ability_lcae_ce(many.drop(columns="group").head(3), tmp_path / "three.png", title="x")
    assert s.axes[0].series == names[:3]
    with pytest.raises(ValueError, match="row 1 .'model-01'. has 0.0"):
        F.ability_lcae_ce(many.assign(ce=[1e6, 0.0] + [1e6] * 18), tmp_path / "bad.png", title="bad")


def test_reliability_grid_has_one_full_panel_per_method(tmp_path):
    frames = []
    for k, m in enumerate(["self-consistency", "non-oracle", "oracle", "post-hoc", "GCM"]):
        f, y = _data(300, seed=10 + k, power=1 + 0.3 * k)
        frames.append(pd.DataFrame({"panel": m, "confidence": f, "correct": y}))
    s = RL.reliability_grid(pd.concat(frames), tmp_path / "reliability.png", title="wm-small, world_qa", n_boot=20,
                           ncols=3)
    _check_png(tmp_path / "reliability.png")
    _check_labelled(s, 5)  # the sixth slot of the 2 x 3 grid is removed
    assert [a.title.split(" (")[0] for a in s.axes] == ["self-consistency", "non-oracle", "oracle", "post-hoc", "GCM"]
    assert all(len(a.series) == 4 for a in s.axes)
    with pytest.raises(ValueError, match="'oracle'"):
        bad = pd.concat(frames)
        bad.loc[bad["panel"] == "oracle", "confidence"] = 2.0
        RL.reliability_grid(bad, tmp_path / "bad.png", title="bad")
