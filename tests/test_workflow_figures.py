"""The figures the workflow itself produces (issue #6: "Each figure is produced on the offline
default and checked in a test for non-empty axes and the expected number of series").

tests/test_report_figures.py checks each figure function on synthetic data; here every PNG under
`<results>/figures/` of the tiny run (config/test.yaml) is checked from the summary its job kept
in the provenance sidecar (`selfknow.report.figures.save`, key "figure"): a real, non-blank PNG;
every axes with data, labels and a title; and as many panels, series and heat-map cells as the
tiny config implies (TINY_FIGURES below). The set of PNGs must be the catalog's figures that
the tiny config builds, so a figure the DAG stops making fails here.

`tiny_figure_problems(results)` is the whole check, callable on any results directory of
config/test.yaml (e.g. a scratch copy where only the figure rules were rerun).
"""
from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO

sys.path.insert(0, str(Path(__file__).parent))
import report_check  # noqa: E402
from test_report_html import CATALOG, NOT_IN_TINY, _catalog_keys  # noqa: E402

TEST_CONFIG = REPO / "config" / "test.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# --- what the tiny config's figures show --------------------------------------------------------
# Per PNG (path under `results`): "axes", the panels (colour bars are not panels); "series", per
# axes the legend labels (a label ending in "*" is a prefix: numbers follow); "titles", per axes;
# "images", per axes the (rows, columns) of each heat-map; "texts", per axes the annotations.
# test_the_tiny_figure_table_follows_config_test_yaml recomputes each number from the config.

#: Reliability panels: the diagonal, the bootstrap band, the SmoothECE curve, the binned points
#: (`figures._reliability_axes`; reliability_job keeps n_boot=200 and n_bins=10)
RELIABILITY_SERIES = ["perfect calibration", "95 % bootstrap band (200 resamples)", "smoothed, SmoothECE *",
                      "10 bins, ECE *"]
#: `persistent.catalog.reliability_panels()`, all present in the tiny run: train_checkpoints 1 gives SC
#: post-hoc / surrogate / copy and the non-oracle surrogate / copy, gcm_model the GCM panels (the GCM
#: trained here: the tiny config has no released adapter)
RELIABILITY_PANELS = ["End-correct baseline", "Self-consistency", "SC post-hoc", "SC surrogate", "SC copy",
                      "Non-oracle training", "Non-oracle surrogate", "Non-oracle copy", "Oracle training",
                      "GCM (trained here)", "GCM (trained here) post-hoc"]
#: answers per reliability panel: persistent.n_test 60 x 3 evaluation checkpoints (world.generator.
#: n_phases 4 checkpoints, minus train_checkpoints 1), pooled; world_qa_b's two domains of the tiny
#: world have 58 test questions only
RELIABILITY_N = 60 * 3
RELIABILITY_N_B = 58 * 3

TINY_FIGURES = {
    # Figure 4, `ladder_plot`: one line per LADDER model (ladder.models: [wm-small]), and one for
    # its levels scored on fewer sessions (`ladder_frame`: the prompted LSA and GT-SelfStats on
    # ladder.prompted_sessions 1 of n_sessions 3)
    "figures/ladder/figure4.png": {"axes": 1, "series": [["wm-small", "wm-small (1 of 3 sessions)"]]},
    # Figure 5, `accuracy_vs_cbf`: one marker series per estimator of ladder.tables.FIG5_ESTIMATORS
    # (ZS and LSA come from ladder.prompted_model), one model-name label per LADDER model
    "figures/ladder/figure5.png": {"axes": 1, "series": [["ZS", "LSA", "Global", "Count", "Bayes-Domain"]],
                                   "texts": [1]},
    # Figure 6, `cbf_matrix`: one heat-map, 1 LADDER model x 15 estimators of the main table
    # (the 14 of ladder.jobs.LEVELS, L0-L4, and the LSA-clean control), every cell annotated
    "figures/ladder/figure6.png": {"axes": 1, "series": [[]], "images": [[[1, 15]]], "texts": [15]},
    # Figure 7, `reliability_bins`: the diagonal and one series per LADDER model
    "figures/ladder/figure7.png": {"axes": 1, "series": [["perfect calibration", "wm-small"]]},
    # Figure 9, `bar_panels`: accuracy, ECE and NoMemory CBF, one unnamed bar series per panel
    "figures/ladder/figure9.png": {"axes": 3, "series": [[], [], []],
                                   "titles": ["(a) answer accuracy", "(b) recorded-confidence ECE",
                                              "(c) NoMemory session CBF"]},
    # Figure 11, `bar_panels`: R4 with its branches (ladder.prompted_sessions 1 gives LSA a
    # session), the session scores of ladder.appendix.FIG11_SESSION, the pooled FIG11_POOLED
    "figures/ladder/figure11.png": {"axes": 3,
                                    "series": [["NoMemory", "ZS", "LSA", "R4", "best of two"],
                                               ["NoMemory", "ZS", "Global", "Dawid-Skene", "GLAD"],
                                               ["Global", "Dawid-Skene", "GLAD"]],
                                    "titles": ["(a) R4, sessions with an LSA profile", "(b) mean session CBF",
                                               "(c) pooled CBF, observed labels"]},
    # LCAE Figure 2, `ability_lcae_ce`: one point per Standard-prompting examinee of Stage 3 with a
    # price (lcae.examinee_models x checkpoints: smollm2's one, wm-base's and wm-small's 4 world
    # checkpoints each), one legend series per model in name order, the checkpoints named where a
    # model has several
    "figures/lcae/figure2.png": {"axes": 1, "series": [["smollm2", "wm-base", "wm-small"]], "texts": [8]},
    # persistent Figure 3, `transfer_heatmap_random_label`: two heat-maps on the first model and
    # dataset; left 4 training x 4 evaluation checkpoints (all of wm-small's), right the 3
    # consecutive pairs (random_label_pairs: consecutive) x 4; cells annotated where the AUC is
    # defined (checked against the figure's data table, tables/persistent/figure3.csv)
    "figures/persistent/figure3.png": {"axes": 2, "series": [[], []],
                                       "titles": ["transfer between checkpoints",
                                                  "second checkpoint with random labels"],
                                       "images": [[[4, 4]], [[3, 4]]]},
    # persistent Figure 4, the same on the second dataset (world_qa_b)
    "figures/persistent/figure4.png": {"axes": 2, "series": [[], []],
                                       "titles": ["transfer between checkpoints",
                                                  "second checkpoint with random labels"],
                                       "images": [[[4, 4]], [[3, 4]]]},
    # persistent Figure 2, `gcm_headroom`: one line per persistent dataset (world_qa_a, world_qa_b)
    # through one point per persistent model (wm-small)
    "figures/persistent/figure2.png": {"axes": 1, "series": [["world_qa_a", "world_qa_b"]]},
    # reliability diagrams, `reliability_grid`: one figure per persistent.models x datasets
    # (wm-small x world_qa_a, world_qa_b): one panel per method, four series each
    "figures/persistent/reliability/wm-small/world_qa_a.png": {
        "axes": len(RELIABILITY_PANELS), "series": [RELIABILITY_SERIES] * len(RELIABILITY_PANELS),
        "titles": [f"{p} (n={RELIABILITY_N})" for p in RELIABILITY_PANELS]},
    "figures/persistent/reliability/wm-small/world_qa_b.png": {
        "axes": len(RELIABILITY_PANELS), "series": [RELIABILITY_SERIES] * len(RELIABILITY_PANELS),
        "titles": [f"{p} (n={RELIABILITY_N_B})" for p in RELIABILITY_PANELS]},
}


def catalog_figures(config: dict) -> set[str]:
    """The PNGs (under `results`) of every catalog figure the tiny config builds (all but
    NOT_IN_TINY), wildcards expanded: only the reliability diagrams have them, one per
    persistent (model, training dataset)."""
    values = {"model": config["persistent"]["models"], "dataset": config["persistent"]["datasets"]}
    out = set()
    for key, item in CATALOG.items():
        if item["kind"] != "figure" or key in NOT_IN_TINY:
            continue
        names = re.findall(r"\{(\w+)\}", item["output"])
        for combo in itertools.product(*(values[n] for n in names)):
            out.add(item["output"].format(**dict(zip(names, combo))))
    return out


def _label_ok(label: str, expected: str) -> bool:
    return label.startswith(expected[:-1]) if expected.endswith("*") else label == expected


#: the transfer figures (3 and 4), whose cells are checked against their data tables
TRANSFER_FIGURES = ("figure3", "figure4")


def _finite_cells(results: Path, figure: str) -> list[int]:
    """A transfer figure's annotated cells per panel: the defined AUCs of its data table."""
    data = pd.read_csv(results / "tables" / "persistent" / f"{figure}.csv")
    cells = data.drop(columns=["panel", "trained on"])
    return [int(cells[data["panel"] == p].notna().sum().sum()) for p in ("transfer", "random labels")]


def figure_problems(results: Path, rel: str, expect: dict) -> list[str]:
    """What is wrong with one figure of a run (empty list: nothing)."""
    png = results / rel
    if not png.is_file():
        return [f"{rel}: missing"]
    data = png.read_bytes()
    problems = []
    if data[:8] != PNG_MAGIC or len(data) < 5000:
        problems.append(f"{rel}: not a real PNG ({len(data)} bytes)")
    elif report_check.png_is_blank(data):
        problems.append(f"{rel}: blank")
    side_path = png.with_suffix(".json")
    side = json.loads(side_path.read_text(encoding="utf-8")) if side_path.is_file() else {}
    if "figure" not in side:
        return problems + [f"{rel}: no figure summary in its sidecar {side_path.name}"]
    keys = list(side)
    if "config" in keys and keys.index("figure") < keys.index("config"):
        problems.append(f"{rel}: the figure summary precedes the config (captions would include it)")
    fig = side["figure"]
    if not fig["path"].endswith(rel):
        problems.append(f"{rel}: the sidecar summarises {fig['path']}")
    axes = fig["axes"]
    if len(axes) != expect["axes"]:
        return problems + [f"{rel}: {len(axes)} axes, expected {expect['axes']}"]
    if not (fig["suptitle"] or all(a["title"] for a in axes)):
        problems.append(f"{rel}: untitled axes")
    for k, a in enumerate(axes):
        where = f"{rel} axes {k} ({a['title']!r})"
        if not a["has_data"]:
            problems.append(f"{where}: no data")
        if not (a["xlabel"] and a["ylabel"]):
            problems.append(f"{where}: unlabelled axis (x {a['xlabel']!r}, y {a['ylabel']!r})")
        if "series" in expect:
            want = expect["series"][k]
            if len(a["series"]) != len(want) or not all(map(_label_ok, a["series"], want)):
                problems.append(f"{where}: series {a['series']}, expected {want}")
        if "titles" in expect and a["title"] != expect["titles"][k]:
            problems.append(f"{where}: expected the title {expect['titles'][k]!r}")
        if "images" in expect and a["image_shapes"] != expect["images"][k]:
            problems.append(f"{where}: heat-maps of shape {a['image_shapes']}, expected {expect['images'][k]}")
        if "texts" in expect and a["n_texts"] != expect["texts"][k]:
            problems.append(f"{where}: {a['n_texts']} annotations, expected {expect['texts'][k]}")
    figure = Path(rel).stem
    if rel == f"figures/persistent/{figure}.png" and figure in TRANSFER_FIGURES:
        texts, cells = [a["n_texts"] for a in axes], _finite_cells(results, figure)
        if texts != cells:
            problems.append(f"{rel}: annotated cells {texts}, defined AUCs in {figure}.csv {cells}")
    return problems


def tiny_figure_problems(results: Path, expected: dict = TINY_FIGURES) -> list[str]:
    """Every figure of a tiny-config run under `results`: the PNGs are exactly the catalog's
    figures for that config and each shows what `expected` says."""
    config = yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))
    found = {p.relative_to(results).as_posix() for p in (results / "figures").rglob("*.png")}
    wanted = catalog_figures(config)
    problems = [f"{rel}: not built" for rel in sorted(wanted - found)]
    problems += [f"{rel}: a figure the catalog does not list" for rel in sorted(found - wanted)]
    for rel in sorted(wanted & found):
        problems += figure_problems(results, rel, expected[rel]) if rel in expected else \
            [f"{rel}: no expectation in TINY_FIGURES"]
    return problems


def test_the_tiny_figure_table_follows_config_test_yaml():
    """TINY_FIGURES names every figure the tiny config builds, and its numbers are the config's."""
    from selfknow.config import checkpoint_names
    from selfknow.protocols.ladder.appendix import FIG11_POOLED, FIG11_SESSION
    from selfknow.protocols.ladder.jobs import LEVELS
    from selfknow.protocols.ladder.tables import FIG5_ESTIMATORS
    from selfknow.protocols.persistent.catalog import reliability_panels

    cfg = yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))
    assert set(TINY_FIGURES) == catalog_figures(cfg)
    assert {"ladder/figure4", "lcae/figure2", "persistent/figure2", "persistent/figure3",
            "persistent/figure4"} <= _catalog_keys(TINY_FIGURES)
    lad, lc, pc = cfg["ladder"], cfg["lcae"], cfg["persistent"]
    t = {k.split("/", 1)[1]: v for k, v in TINY_FIGURES.items()}
    assert t["ladder/figure4.png"]["series"] == [
        [x for m in lad["models"] for x in (m, f"{m} ({lad['prompted_sessions']} of {lad['n_sessions']} sessions)")]]
    assert 0 < lad["prompted_sessions"] < lad["n_sessions"]
    assert lad.get("prompted_model") and t["ladder/figure5.png"]["series"] == [FIG5_ESTIMATORS]
    assert t["ladder/figure5.png"]["texts"] == [len(lad["models"])]
    cells = len(lad["models"]) * (len(LEVELS) + 1)  # + the LSA-clean control
    assert t["ladder/figure6.png"]["images"] == [[[len(lad["models"]), len(LEVELS) + 1]]]
    assert t["ladder/figure6.png"]["texts"] == [cells]
    assert t["ladder/figure7.png"]["series"] == [["perfect calibration", *lad["models"]]]
    assert lad["prompted_sessions"] >= 1  # LSA profiles, hence R4, in Figure 11 (a)
    assert t["ladder/figure11.png"]["series"][1:] == [FIG11_SESSION, FIG11_POOLED]
    priced = sorted(m for m in lc["examinee_models"] if m in lc["prices"])
    assert t["lcae/figure2.png"]["series"] == [priced]
    assert t["lcae/figure2.png"]["texts"] == [sum(len(checkpoint_names(cfg, m)) for m in priced
                                                  if len(checkpoint_names(cfg, m)) > 1)]
    assert "standard" in lc["strategies"] and "ids_dpr" in lc["conditions"]
    ck = checkpoint_names(cfg, pc["models"][0])
    assert pc["random_label_pairs"] == "consecutive"
    assert t["persistent/figure3.png"]["images"] == [[[len(ck), len(ck)]], [[len(ck) - 1, len(ck)]]]
    assert len(pc["datasets"]) == 2 and t["persistent/figure4.png"] == t["persistent/figure3.png"]
    assert t["persistent/figure2.png"]["series"] == [pc["datasets"]] and len(pc["models"]) == 1
    ntrain = pc["train_checkpoints"]
    assert ntrain >= 1 and pc.get("gcm_model") and "gcm_adapter" not in pc  # RELIABILITY_PANELS are drawn
    assert RELIABILITY_PANELS == [v for k, v in reliability_panels().items() if k not in ("gcm", "gcm_posthoc")]
    assert RELIABILITY_N == pc["n_test"] * (len(ck) - ntrain)


def test_the_figure_check_catches_a_missing_figure_and_a_wrong_series_count(tmp_path):
    from selfknow.report.figures import ladder_plot

    results = tmp_path / "results"
    rel = "figures/ladder/figure4.png"
    df = pd.DataFrame({"model": ["wm-small"] * 5 + ["wm-base"] * 5, "level": [f"L{i}" for i in range(5)] * 2,
                       "cbf": [0.5, 0.6, 0.7, 1.0, 0.8] * 2, "se": [0.01] * 10})
    ladder_plot(df, results / rel, title="Figure 4", provenance={"config_hash": "h", "config": {}})
    problems = tiny_figure_problems(results)
    wrong = "series ['wm-small', 'wm-base'], expected ['wm-small', 'wm-small (1 of 3 sessions)']"
    assert any(p.startswith(f"{rel} axes 0") and p.endswith(wrong) for p in problems), problems
    assert "figures/lcae/figure2.png: not built" in problems
    ladder_plot(df[df["model"] == "wm-small"], results / rel, title="Figure 4")  # no provenance: no summary kept
    (results / rel).with_suffix(".json").unlink()
    assert f"{rel}: no figure summary in its sidecar figure4.json" in tiny_figure_problems(results)


@pytest.mark.slow
def test_every_figure_of_the_tiny_run_shows_what_the_config_implies(tiny_run):
    assert tiny_figure_problems(tiny_run) == []
