"""LADDER appendix items (protocols/ladder/optimisation.py, lite.py, appendix.py): Table 18's
optimised GLAD-style / Dawid-Skene fits against a brute-force maximum of an independently
written objective, Table 33's correlations against scipy.stats and hand-computed summaries,
and the frames of Figures 9 and 11."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.optimize import check_grad, differential_evolution

from selfknow.protocols.ladder import appendix as A
from selfknow.protocols.ladder import lite as L
from selfknow.protocols.ladder import optimisation as O
from selfknow.protocols.ladder.estimators import GLAD_ALPHA0, Stream, dawid_skene_domain, glad_domain

# A tiny clean-label stream: 2 domains (codes 0, 1), persona states 0 / 1, labels.
DOM = np.array([0, 0, 0, 1, 1, 1, 1])
ST = np.array([1, 0, 1, 0, 1, 0, 1])
Y = np.array([1, 1, 0, 0, 0, 1, 0])


def _sig(z):
    return 1.0 / (1.0 + math.exp(-z))


def glad_map_by_hand(alpha, beta, pi, priors=True):
    """GLAD's MAP objective written label by label (O.glad_objective's definition)."""
    val = 0.0
    for d, s, y in zip(DOM, ST, Y):
        a = _sig(alpha[s] * math.exp(beta[d]))
        p1 = a if y == 1 else 1 - a          # P(y | z = 1)
        val += math.log(pi[d] * p1 + (1 - pi[d]) * (1 - p1))
    val += sum(math.log(p) + math.log(1 - p) for p in pi)
    if priors:
        val -= 0.5 * sum((alpha[s] - GLAD_ALPHA0[s]) ** 2 for s in (0, 1)) + 0.5 * sum(b * b for b in beta)
    return val


def ds_map_by_hand(pi, tpr, fpr):
    val = 0.0
    for d, s, y in zip(DOM, ST, Y):
        l1 = tpr[s] if y == 1 else 1 - tpr[s]
        l0 = fpr[s] if y == 1 else 1 - fpr[s]
        val += math.log(pi[d] * l1 + (1 - pi[d]) * l0)
    return val + sum(math.log(p) + math.log(1 - p) for p in pi)


SETTINGS = O.Optimisation(restarts=4, max_iter=5000, tol=1e-12, glad_priors=True)


@pytest.mark.parametrize("kind,k", [("GLAD", 6), ("Dawid-Skene", 6)])
def test_objective_gradients_match_finite_differences(kind, k):
    rng = np.random.default_rng(3)
    fn = O.OBJECTIVES[kind]
    for _ in range(3):
        x = rng.normal(0, 1, k)
        err = check_grad(lambda x: fn(x, DOM, ST, Y, 2)[0], lambda x: fn(x, DOM, ST, Y, 2)[1], x)
        assert err < 1e-5


def test_objectives_equal_the_hand_written_ones():
    x = np.array([0.3, 1.2, -0.4, 0.7, 0.1, -0.8])
    pi = 1 / (1 + np.exp(-x[4:]))
    assert O.glad_objective(x, DOM, ST, Y, 2)[0] == pytest.approx(glad_map_by_hand(x[:2], x[2:4], pi))
    assert O.glad_objective(x, DOM, ST, Y, 2, priors=False)[0] == pytest.approx(
        glad_map_by_hand(x[:2], x[2:4], pi, priors=False))
    u = 1 / (1 + np.exp(-x))
    assert O.ds_objective(x, DOM, ST, Y, 2)[0] == pytest.approx(ds_map_by_hand(u[:2], u[[2, 4]], u[[3, 5]]))


def test_optimised_glad_reaches_the_brute_force_maximum():
    # global search of the hand-written MAP objective in a box that holds its maximum
    bounds = [(-8, 8), (-8, 8), (-4, 4), (-4, 4), (1e-4, 1 - 1e-4), (1e-4, 1 - 1e-4)]
    ref = differential_evolution(lambda v: -glad_map_by_hand(v[:2], v[2:4], v[4:]), bounds, seed=0,
                                 tol=1e-12, maxiter=3000, polish=True)
    fit = O.optimise("GLAD", DOM, ST, Y, 2, SETTINGS, np.random.default_rng(0))
    best = fit["optimised"]
    assert best["objective"] * Y.size == pytest.approx(-ref.fun, abs=1e-6)
    assert best["profile"] == pytest.approx(ref.x[4:], abs=2e-3)
    assert best["converged"]


def test_optimised_dawid_skene_reaches_the_brute_force_maximum():
    eps = 1e-6
    bounds = [(eps, 1 - eps)] * 6  # pi_0, pi_1, TPR_0, TPR_1, FPR_0, FPR_1
    ref = differential_evolution(lambda v: -ds_map_by_hand(v[:2], v[2:4], v[4:]), bounds, seed=0,
                                 tol=1e-12, maxiter=3000, polish=True)
    fit = O.optimise("Dawid-Skene", DOM, ST, Y, 2, SETTINGS, np.random.default_rng(0))
    # the maximum lies on a ridge (one label per turn does not identify DS): compare values
    assert fit["optimised"]["objective"] * Y.size == pytest.approx(-ref.fun, abs=1e-4)
    assert fit["optimised"]["objective"] >= fit["fixed budget"]["objective"] - 1e-12


@pytest.mark.parametrize("kind,estimator", [("GLAD", glad_domain), ("Dawid-Skene", dawid_skene_domain)])
def test_fixed_budget_is_the_tables_estimator(kind, estimator):
    rng = np.random.default_rng(5)
    n = 30
    dom = np.array([f"d{i}" for i in rng.integers(0, 6, n)])
    frame = pd.DataFrame({"domain": dom, "confidence": 0.5, "correct": rng.random(n) < 0.6,
                          "in_expertise": rng.random(n) < 0.4})
    frame["label_strict"] = frame["correct"].astype(float)
    s = Stream.from_frame(frame)
    names, codes = s.codes()
    fit = O.optimise(kind, codes, s.in_expertise.astype(int), s.label.astype(int), names.size,
                     O.Optimisation(1, 500, 1e-9, False), rng)
    table = estimator(s, query=False).profile
    assert dict(zip(names, fit["fixed budget"]["profile"])) == pytest.approx(table)
    assert fit["optimised"]["objective"] >= fit["fixed budget"]["objective"] - 1e-12


def test_optimise_rejects_an_unlabelled_stream_and_unknown_estimators():
    empty = np.array([], int)
    with pytest.raises(ValueError, match="no labels"):
        O.optimise("GLAD", empty, empty, empty, 2, SETTINGS, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown estimator"):
        O.optimise("Count", DOM, ST, Y, 2, SETTINGS, np.random.default_rng(0))


def _turns(model, sessions):
    """Turn records: sessions = list of [(domain, confidence, correct), ...]."""
    rows = []
    for sid, turns in enumerate(sessions):
        for t, (d, c, y) in enumerate(turns, start=1):
            rows.append({"model": model, "session_id": str(sid), "turn": t, "domain": d, "confidence": c,
                         "correct": y, "feedback_text": "ok", "in_expertise": False, "user_model": "rules"})
    return pd.DataFrame(rows)


def test_optimisation_scores_rows_and_table():
    sess = [[("a", .5, True), ("a", .5, True), ("b", .5, False), ("b", .5, True), ("b", .5, False)]] * 2
    turns = _turns("m", sess)
    turns["in_expertise"] = [True, False, True, False, True] * 2
    out = O.optimisation_scores(turns, SETTINGS, seed=1)
    assert len(out) == 2 * 2 * 2  # sessions x estimators x settings
    tab = A.optimisation_table(out)
    assert list(tab["setting"].unique()) == list(O.SETTINGS)
    assert tab["n_sessions"].tolist() == [2] * 4
    g = out[(out["estimator"] == "GLAD") & (out["setting"] == "optimised")]
    row = tab[(tab["estimator"] == "GLAD") & (tab["setting"] == "optimised")].iloc[0]
    assert row["CBF"] == pytest.approx(g["CBF"].mean())
    assert row["loglik"] == pytest.approx(g["loglik"].mean())


# --- Table 33 --------------------------------------------------------------------------------

def test_correlations_match_scipy_on_a_three_model_toy():
    lite, full = [0.20, 0.10, 0.10], [0.30, 0.05, 0.25]  # a tie in the lite summaries
    r, rho, note = L.correlations(lite, full)
    assert r == pytest.approx(stats.pearsonr(lite, full).statistic)
    assert rho == pytest.approx(stats.spearmanr(lite, full).statistic)
    assert note == ""
    # by hand: ranks (3, 1.5, 1.5) and (3, 1, 2), centred (1, -.5, -.5) and (1, -1, 0):
    # ρ = 1.5 / sqrt(1.5 · 2)
    assert rho == pytest.approx(1.5 / math.sqrt(1.5 * 2))


def test_correlations_are_undefined_below_three_configurations_or_when_constant():
    r, rho, note = L.correlations([0.1, 0.2, np.nan], [0.3, 0.1, 0.2])
    assert math.isnan(r) and math.isnan(rho) and "fewer than 3" in note
    r, rho, note = L.correlations([0.1, 0.1, 0.1], [0.3, 0.1, 0.2])
    assert math.isnan(r) and "constant" in note


def test_lite_runs_summarise_the_first_records_by_hand():
    # session 0: a a b b, correct 1 0 1 1, confidence .9 .9 .6 .6 -> NoMemory CBF 1 - (0 + .5)/2
    # = 0.75; ECE (|.9+.9 - 1| + |.6+.6 - 2|) / 4 = 0.4. Session 1 only counts in the full budget.
    s0 = [("a", .9, True), ("a", .9, False), ("b", .6, True), ("b", .6, True)]
    s1 = [("a", .5, True), ("a", .5, True), ("b", .5, False), ("b", .5, False)]
    runs = L.lite_runs({"m": _turns("m", [s0, s1]), "short": _turns("s", [s0])}, [4, 8])
    m = runs.set_index("run").loc["m"]
    assert m["CBF_T4"] == pytest.approx(0.75) and m["ECE_T4"] == pytest.approx(0.4)
    # session 1: CBF 1 - (.5 + .5)/2 = 0.5; ECE 0 (one bin, mean confidence .5 = accuracy .5);
    # the full budget averages the two sessions
    assert m["CBF_T8"] == pytest.approx((0.75 + 0.5) / 2) and m["ECE_T8"] == pytest.approx(0.4 / 2)
    short = runs.set_index("run").loc["short"]
    assert math.isnan(short["CBF_T8"]) and short["records"] == 4
    tab = L.lite_table(runs, [4, 8])
    assert tab["n_configurations"].tolist() == [1, 1] and tab["pearson_r"].isna().all()
    with pytest.raises(ValueError, match="lite_budgets"):
        L.lite_table(runs, [8, 4])


# --- Figures 9 and 11 ---------------------------------------------------------------------------

def _score_parts():
    models = ["m1", "m2"]
    sessions = pd.DataFrame([{"model": m, "session_id": str(s), "estimator": e, "CBF": c + 0.01 * s}
                             for m, base in zip(models, (0.6, 0.7)) for s in range(2)
                             for e, c in (("NoMemory", base), ("ZS", base + .1), ("LSA", base - .05),
                                          ("Global", base + .02), ("Dawid-Skene", base + .03),
                                          ("GLAD", base + .04), ("Count", base))])
    answers = pd.DataFrame({"model": models, "accuracy": [0.8, 0.4], "ECE": [0.1, 0.3]})
    # held-out rows without the three R4 estimators: Figure 11 shows the observed R4 only
    heldout = pd.DataFrame({"model": models, "estimator": "Global", "mae_test": 0.2, "cbf_train": 0.8})
    controls = pd.DataFrame([{"model": m, "session_id": "*", "estimator": e, "CBF": v, "scope": "pooled",
                              "condition": cond} for m in models for e, v in (("Global", .7), ("GLAD", .8),
                                                                              ("Count", .6))
                             for cond in ("observed", "clean")])
    return sessions, answers, heldout, controls


def test_figure9_frame_orders_models_by_accuracy():
    sessions, answers, *_ = _score_parts()
    f = A.figure9_frame(sessions, answers)
    assert list(pd.unique(f["panel"])) == ["(a) answer accuracy", "(b) recorded-confidence ECE",
                                           "(c) NoMemory session CBF"]
    assert f[f["panel"].str.startswith("(a)")]["model"].tolist() == ["m2", "m1"]
    cbf = f[f["panel"].str.startswith("(c)")].set_index("model")["value"]
    assert cbf["m1"] == pytest.approx(0.605) and cbf["m2"] == pytest.approx(0.705)


def test_figure11_frame_and_its_panels(tmp_path):
    sessions, answers, heldout, controls = _score_parts()
    f = A.figure11_frame(sessions, heldout, controls)
    a = f[f["panel"].str.startswith("(a)")]
    assert list(pd.unique(a["series"])) == ["NoMemory", "ZS", "LSA", "R4", "best of two"]
    # ZS beats NoMemory on both models, so R4 takes ZS
    r4 = a[a["series"] == "R4"].set_index("model")["value"]
    assert r4["m1"] == pytest.approx(0.705) and r4["m2"] == pytest.approx(0.805)
    b = f[f["panel"].str.startswith("(b)")]
    assert list(pd.unique(b["series"])) == A.FIG11_SESSION
    c = f[f["panel"].str.startswith("(c)")]
    assert sorted(c["series"].unique()) == ["GLAD", "Global"]  # observed pooled only, no Count
    from selfknow.report.figures import bar_panels

    summary = bar_panels(f, tmp_path / "f11.png", title="Figure 11")
    assert [ax.series for ax in summary.axes] == [["NoMemory", "ZS", "LSA", "R4", "best of two"],
                                                  A.FIG11_SESSION, ["Global", "GLAD"]]
    assert all(ax.has_data and ax.ylabel for ax in summary.axes)
    s9 = bar_panels(A.figure9_frame(sessions, answers), tmp_path / "f9.png", title="Figure 9")
    assert [ax.series for ax in s9.axes] == [[], [], []] and [ax.n_patches for ax in s9.axes] == [2, 2, 2]


def test_write_appendix_writes_every_table_and_figure(tmp_path, monkeypatch):
    """Every entry of the appendix job goes through the driver, and each builder returns a `Built`."""
    from ladder_fixtures import built_only
    from selfknow.protocols.ladder.catalog import APPENDIX_ENTRIES
    from selfknow.records import write_parquet

    called = built_only(monkeypatch)

    sessions, answers, heldout, controls = _score_parts()
    parts = {}
    for name, df in (("sessions", sessions), ("answers", answers), ("heldout", heldout), ("controls", controls)):
        parts[name] = [str(tmp_path / f"{name}.parquet")]
        write_parquet(df, parts[name][0])
    s0 = [("a", .9, True), ("a", .9, False), ("b", .6, True), ("b", .6, True)]
    runs = []
    for k, m in enumerate(["m1", "m2", "m3"]):
        t = _turns(m, [s0, s0[::-1]])
        t.loc[:k, "correct"] = ~t.loc[:k, "correct"]  # each run its own outcomes
        runs.append(str(tmp_path / f"run_{m}.parquet"))
        write_parquet(t, runs[-1])
    opt = str(tmp_path / "opt.parquet")
    write_parquet(O.optimisation_scores(_turns("m1", [s0]), SETTINGS, seed=0), opt)
    tables = {f"{t.name}_{e}": str(tmp_path / f"{t.name}.{e}") for t in APPENDIX_ENTRIES if not t.figure
              for e in ("csv", "md")}
    figures = {t.name: str(tmp_path / f"{t.name}.png") for t in APPENDIX_ENTRIES if t.figure}
    summary = A.write_appendix([opt], runs, parts, {**tables, **figures}, budgets=[4, 8])
    assert called == [t.builder for t in APPENDIX_ENTRIES]
    assert summary == {"tables": 3, "figures": 2, "runs": 3, "lite_n": 3}
    assert "T=4 vs T=8" in (tmp_path / "table33.md").read_text().splitlines()[0]
    t33 = pd.read_csv(tables["table33_csv"])
    runs_df = pd.read_csv(tables["table33_runs_csv"])
    ece = t33.set_index("metric").loc["NoMemory ECE"]
    r, rho, _ = L.correlations(runs_df["ECE_T4"], runs_df["ECE_T8"])
    assert ece["pearson_r"] == pytest.approx(r) and ece["n_configurations"] == 3
    assert set(pd.read_csv(tables["table18_csv"])["setting"]) == set(O.SETTINGS)
    assert all((tmp_path / f"{f}.png").stat().st_size > 5000 for f in figures)
