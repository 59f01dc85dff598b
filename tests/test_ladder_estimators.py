"""LADDER estimators, label aggregation, decoder engine and metrics (SPEC §2).

Golden references: crowd-kit (DawidSkene, GLAD), scikit-learn (roc_auc_score,
brier_score_loss), scipy (kendalltau); hand-computed small cases; parameter recovery on
simulated streams with known domain accuracies.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

# crowd-kit's GLAD uses pandas' deprecated inplace= keywords; not our warnings to see.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore:.*inplace.*")

from selfknow.protocols.ladder.feedback import _parse, decode_feedback, decoder_precision_recall, load_rules
from selfknow.protocols.ladder.aggregate import score_pooled, score_sessions
from selfknow.protocols.ladder.bootstrap import paired_cluster_bootstrap, session_bootstrap
from selfknow.protocols.ladder.estimators import ESTIMATORS, Stream, fit_estimator
from selfknow.protocols.ladder import metrics as M
from selfknow.stats.dawid_skene import dawid_skene
from selfknow.stats.glad import glad


# --------------------------------------------------------------------------- label streams

def _crowd_stream(seed: int, n_tasks: int, acc, k: int = 2, per_task: int = 3) -> pd.DataFrame:
    """Tasks with a latent class, each labelled by `per_task` of the workers (here: persona
    states with different reliabilities); a wrong label is a uniformly drawn other class."""
    rng = np.random.default_rng(seed)
    z = rng.integers(0, k, n_tasks)
    rows = []
    for t in range(n_tasks):
        for w in rng.choice(len(acc), per_task, replace=False):
            y = z[t] if rng.random() < acc[w] else (z[t] + rng.integers(1, k)) % k
            rows.append((t, int(w), int(y)))
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


@pytest.mark.parametrize("k,seed", [(2, 0), (3, 1)])
def test_dawid_skene_matches_crowdkit(k, seed):
    from crowdkit.aggregation import DawidSkene
    n = 80
    df = _crowd_stream(seed, n, [0.9, 0.8, 0.7, 0.6, 0.55], k=k)
    ref = DawidSkene(n_iter=100, tol=1e-5).fit_predict_proba(df)
    ours = dawid_skene(df.task.to_numpy(), df.worker.to_numpy(), df.label.to_numpy(), k,
                       max_iter=100, tol=1e-5)
    ref = ref.loc[np.arange(n), list(range(k))].to_numpy()
    assert np.abs(ref - ours.posteriors).max() < 0.01
    # and the result is not trivially the majority vote (the test can tell them apart)
    mv = np.zeros((n, k))
    np.add.at(mv, (df.task, df.label), 1)
    assert np.abs(mv / mv.sum(1, keepdims=True) - ours.posteriors).max() > 0.05


def test_glad_matches_crowdkit():
    from crowdkit.aggregation import GLAD
    df = _crowd_stream(2, 30, [0.9, 0.75, 0.6, 0.55], k=2)
    ref = GLAD(n_iter=100, tol=1e-5).fit_predict_proba(df)
    ours = glad(df.task.to_numpy(), df.worker.to_numpy(), df.label.to_numpy(), 2)
    ref = ref.loc[np.arange(30), [0, 1]].to_numpy()
    assert np.abs(ref - ours.posteriors).max() < 0.01


def test_dawid_skene_recovers_worker_confusions():
    acc = [0.9, 0.8, 0.7, 0.6, 0.55]
    df = _crowd_stream(3, 2000, acc, per_task=5)
    r = dawid_skene(df.task.to_numpy(), df.worker.to_numpy(), df.label.to_numpy(), 2,
                    max_iter=1000, tol=1e-9)
    diag = np.array([r.errors[w].diagonal().mean() for w in range(5)])
    assert np.allclose(diag, acc, atol=0.03)


# --------------------------------------------------------------------------- simulated sessions

TRUE_ACC = {"algebra": 0.2, "anatomy": 0.4, "biology": 0.6, "chemistry": 0.8, "ethics": 0.9}


def _stream(n_per: int = 200, seed: int = 0, clean: bool = True, coverage: float = 1.0,
            flip_out: float = 0.0) -> Stream:
    """Exactly round(acc·n) correct answers per domain, shuffled; labels = outcomes
    (clean), optionally flipped outside expertise and thinned to `coverage`."""
    rng = np.random.default_rng(seed)
    dom, cor = [], []
    for d, a in TRUE_ACC.items():
        k = round(a * n_per)
        dom += [d] * n_per
        cor += [True] * k + [False] * (n_per - k)
    order = rng.permutation(len(dom))
    dom, cor = np.array(dom)[order], np.array(cor)[order]
    inexp = rng.random(dom.size) < 0.5
    lab = cor.astype(float)
    if not clean:
        flip = (~inexp) & (rng.random(dom.size) < flip_out)
        lab[flip] = 1 - lab[flip]
    lab[rng.random(dom.size) >= coverage] = np.nan
    conf = np.clip(rng.normal(0.7, 0.15, dom.size), 0, 1)
    return Stream(dom, conf, cor, lab, lab.copy(), inexp)


def test_count_and_oracle_recover_exactly_with_clean_labels():
    s = _stream()
    for est in ["Count", "UF-PDC", "Platt-Online", "HistBin-Online", "OraclePDC"]:
        prof = fit_estimator(est, s).profile
        assert prof == pytest.approx(TRUE_ACC, abs=1e-12), est


@pytest.mark.parametrize("est", ["Bayes-Domain", "EM-Joint", "Dawid-Skene", "GLAD"])
def test_em_and_bayes_recover_within_005_with_clean_labels(est):
    """"Within 0.05" is read as the paper's profile error: mean_d |p̂_d − a_d| = 1 − CBF.
    With one label per turn, prevalence and reliability are identified only along a ridge
    (clean labels fit "stretched" prevalences with reliability r < 1 equally well), so
    single domains of the latent-reliability fits can miss by more (up to ~0.08 here);
    only the priors pick a point on the ridge (paper §E.1, §E.2)."""
    s = _stream()
    prof = fit_estimator(est, s, query=False).profile
    err = np.array([abs(prof[d] - a) for d, a in TRUE_ACC.items()])
    assert err.mean() < 0.05, (est, prof)
    assert err.max() < 0.1, (est, prof)


def test_global_and_nomemory_profiles():
    s = _stream()
    g = fit_estimator("Global", s).profile
    overall = np.mean(list(TRUE_ACC.values()))
    n = len(s)
    assert np.allclose(list(g.values()), (overall * n + 1) / (n + 2))
    assert set(fit_estimator("NoMemory", s).profile.values()) == {0.5}


def test_dawid_skene_beats_count_under_asymmetric_noise():
    # Outside expertise 40 % of labels are flipped: counting is biased towards 0.5, the
    # per-state confusion model corrects for it (the reason DS exists, paper §E.1).
    s = _stream(n_per=400, seed=4, clean=False, flip_out=0.4)
    err = {e: np.mean([abs(fit_estimator(e, s, query=False).profile[d] - a) for d, a in TRUE_ACC.items()])
           for e in ["Count", "Dawid-Skene"]}
    assert err["Dawid-Skene"] < err["Count"] - 0.03, err


def test_query_confidence_uses_only_earlier_turns():
    s = _stream(n_per=6, seed=5)
    for name in ESTIMATORS:
        q1 = fit_estimator(name, s).query_confidence
        lab2 = s.label.copy()
        lab2[-1] = 1 - lab2[-1] if not np.isnan(lab2[-1]) else 1.0  # change the last label only
        s2 = Stream(s.domain, s.confidence, s.correct, lab2, lab2.copy(), s.in_expertise)
        q2 = fit_estimator(name, s2).query_confidence
        assert np.allclose(q1, q2, equal_nan=True), name
        assert q1.shape == (len(s),)


def test_online_estimators_hand_computed():
    dom = np.array(["a", "a", "b", "a"])
    conf = np.array([0.9, 0.6, 0.3, 0.75])
    cor = np.array([True, False, True, True])
    lab = np.array([1.0, np.nan, 0.0, 0.0])
    uf = np.array([1.0, 0.0, 0.0, 0.0])  # the second reply was "uncertain"
    s = Stream(dom, conf, cor, lab, uf, np.array([True, False, False, True]))
    # UF-PDC: domain a has labels 1, 0(uncertain), 0 -> 1/3; query: conf, 1/1, conf(b), 1/2
    out = fit_estimator("UF-PDC", s)
    assert out.profile == pytest.approx({"a": 1 / 3, "b": 0.0})
    assert out.query_confidence == pytest.approx([0.9, 1.0, 0.3, 0.5])
    # Bayes: a -> (1+1)/(2+2) ; query 0.5, 2/3, 0.5, 2/3
    out = fit_estimator("Bayes-Domain", s)
    assert out.profile == pytest.approx({"a": 0.5, "b": 1 / 3})
    assert out.query_confidence == pytest.approx([0.5, 2 / 3, 0.5, 2 / 3])
    # Oracle: running accuracy
    out = fit_estimator("OraclePDC", s)
    assert out.profile == pytest.approx({"a": 2 / 3, "b": 1.0})
    assert out.query_confidence == pytest.approx([0.9, 1.0, 0.3, 0.5])
    # Platt: one SGD step after turn 1 (label 1, c = 0.9, w = 1, b = 0)
    p0 = 1 / (1 + math.exp(-0.9))
    w1, b1 = 1 - 0.1 * ((p0 - 1) * 0.9 + 1e-3), -0.1 * (p0 - 1)
    q = fit_estimator("Platt-Online", s).query_confidence
    assert q[0] == pytest.approx(p0)
    assert q[1] == pytest.approx(1 / (1 + math.exp(-(w1 * 0.6 + b1))))
    # HistBin: turn 4 (c = 0.75, bin 7) has no earlier labelled turn in its bin -> own conf;
    # turn 1's bin (9) is only reused by later turns in bin 9.
    assert fit_estimator("HistBin-Online", s).query_confidence == pytest.approx([0.9, 0.6, 0.3, 0.75])
    # EM-Joint online: after turn 1 (y=1, in, r=0.7, p=0.5) posterior 0.7 -> p_a = 1.7/3
    q = fit_estimator("EM-Joint", s).query_confidence
    assert q[:3] == pytest.approx([0.5, 1.7 / 3, 0.5], abs=1e-9)


# --------------------------------------------------------------------------- decoder engine

def test_rule_priority_and_label_maps():
    rs = load_rules("frozen")
    assert rs.decode("That's correct, but actually, the answer is B.")[0] == "negative"
    assert rs.decode("Are you sure? That's right I think.")[0] == "uncertain"
    assert rs.decode("Yes, that's right!")[0] == "positive"
    assert rs.decode("Could you elaborate on that?")[0] == "neutral"
    assert rs.decode("   ")[0] == "neutral" and rs.decode(None)[0] == "neutral"
    d = decode_feedback(["That's right.", "Hmm, that seems odd", "Nice.", "I disagree"], "frozen")
    assert d.decoded_category.tolist() == ["positive", "uncertain", "neutral", "negative"]
    assert d.label_strict.tolist()[:1] == [1.0] and np.isnan(d.label_strict[1])
    assert d.label_uncertain_as_negative.tolist() == pytest.approx([1.0, 0.0, np.nan, 0.0], nan_ok=True)


def test_expanded_rules_extend_frozen():
    texts = ["I believe there might be a small misunderstanding here.",
             "That sounds about right, thanks.", "That's correct.", "Could you explain?"]
    fz = decode_feedback(texts, "frozen").decoded_category.tolist()
    ex = decode_feedback(texts, "expanded").decoded_category.tolist()
    assert fz == ["neutral", "neutral", "positive", "neutral"]
    assert ex == ["negative", "positive", "positive", "neutral"]


def test_bad_rule_file_names_the_problem():
    with pytest.raises(ValueError, match="classes\\[0\\].patterns\\[0\\]"):
        _parse({"name": "x", "default": "neutral", "label_maps": {"strict": {"neutral": None, "a": 1}},
                "classes": [{"name": "a", "patterns": [{"id": "p", "re": "("}]}]}, "bad.yaml")
    with pytest.raises(ValueError, match="label_maps.strict lacks"):
        _parse({"name": "x", "default": "neutral", "label_maps": {"strict": {"neutral": None}},
                "classes": [{"name": "a", "patterns": [{"id": "p", "re": "a"}]}]}, "bad.yaml")


def test_decoder_precision_recall_hand_computed():
    r = decoder_precision_recall([1, 0, np.nan, 1], [True, True, False, True])
    assert r["coverage"] == 0.75 and r["precision"] == pytest.approx(2 / 3)
    assert r["recall"] == 0.5 and r["precision_negative"] == 0.0


# --------------------------------------------------------------------------- metrics

def test_ece_authors_bins_and_spec_variant():
    # 0.7 < linspace(0,1,11)[7] = 0.7000000000000001 -> bin 6 with 0.65; 1.0 is in no bin.
    conf = np.array([0.65, 0.7, 1.0, 1.0])
    y = np.array([1, 0, 1, 0])
    assert M.ece(conf, y) == pytest.approx(abs(0.65 + 0.7 - 1) / 4)
    assert M.ece(conf, y, include_one=True) == pytest.approx((abs(1.35 - 1) + abs(2 - 1)) / 4)
    # away from the edges the SPEC variant equals classification.binned_ece
    from selfknow.stats.classification import binned_ece
    rng = np.random.default_rng(0)
    c = rng.random(500) * 0.999
    c = c[np.abs(c * 10 - np.round(c * 10)) > 1e-6]
    yy = (rng.random(c.size) < c).astype(float)
    assert M.ece(c, yy, include_one=True) == pytest.approx(binned_ece(c, yy), abs=1e-12)


def test_answer_metrics_against_sklearn():
    from sklearn.metrics import brier_score_loss, roc_auc_score
    rng = np.random.default_rng(1)
    c = np.round(rng.random(200), 1)
    y = rng.random(200) < c
    m = M.answer_metrics(c, y)
    assert m["AUROC"] == pytest.approx(roc_auc_score(y, c))
    assert m["Brier"] == pytest.approx(brier_score_loss(y, c))
    assert m["HR"] == pytest.approx((~y[c > 0.7]).mean())
    assert m["norm_HR"] == pytest.approx((c[~y] > 0.7).mean())
    assert m["conf_gap"] == pytest.approx(c[y].mean() - c[~y].mean())
    assert M.auroc([0.2, 0.9], [1, 1]) == 0.5
    assert M.hallucination_rate([0.7, 0.5], [0, 0]) == 0.0


def test_profile_metrics_hand_computed_and_kendall_vs_scipy():
    from scipy.stats import kendalltau
    prof = {"a": 0.9, "b": 0.5, "c": 0.2}
    doms = ["a"] * 4 + ["b"] * 2 + ["c"] * 2 + ["d"]  # d has one answer: not eligible
    cor = [1, 1, 1, 0, 1, 0, 0, 0, 1]
    r = M.profile_metrics(prof, doms, cor)
    # a_d = 0.75, 0.5, 0.0
    assert r["CBF"] == pytest.approx(1 - (0.15 + 0 + 0.2) / 3)
    assert r["bias"] == pytest.approx((0.15 + 0 + 0.2) / 3)
    assert r["CBF_L0"] == pytest.approx(1 - (0.25 + 0 + 0.5) / 3)
    assert r["norm_CBF"] == pytest.approx((r["CBF"] - r["CBF_L0"]) / (1 - r["CBF_L0"]))
    mp, ma = np.mean([0.9, 0.5, 0.2]), 1.25 / 3
    assert r["shape_error"] == pytest.approx(np.mean(np.abs(np.array([0.9, 0.5, 0.2]) - mp - (np.array([0.75, 0.5, 0]) - ma))))
    rng = np.random.default_rng(2)
    p, a = np.round(rng.random(20), 1), np.round(rng.random(20), 1)
    assert M.kendall_tau(p, a) == pytest.approx(kendalltau(p, a).statistic)
    assert math.isnan(M.kendall_tau([0.5, 0.5], [0.1, 0.9]))


# --------------------------------------------------------------------------- scoring and bootstraps

def _turns(n_sessions: int = 6, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    replies = {1: "That's correct.", 0: "Actually, the answer is C."}
    for s in range(n_sessions):
        for t in range(1, 31):
            d = list(TRUE_ACC)[rng.integers(0, 5)]
            y = bool(rng.random() < TRUE_ACC[d])
            rows.append({"model": "m", "session_id": str(s), "turn": t, "domain": d,
                         "item_id": f"{d}-{rng.integers(0, 8)}", "confidence": float(rng.random()),
                         "correct": y, "in_expertise": bool(rng.random() < 0.5),
                         "feedback_text": replies[int(y)] if rng.random() < 0.6 else "Could you explain?",
                         "abstain": False})
    return pd.DataFrame(rows)


def test_score_sessions_oracle_and_nomemory_anchor_normalised_cbf():
    per = score_sessions(_turns(), ["NoMemory", "OraclePDC", "Count"])
    assert set(per.columns) >= {"CBF", "norm_CBF", "bias", "shape_error", "kendall_tau", "ECE",
                                "Brier", "AUROC", "HR", "norm_HR", "conf_gap"}
    by = per.set_index(["session_id", "estimator"])
    assert (per[per.estimator == "OraclePDC"].CBF == 1.0).all()
    assert np.allclose(per[per.estimator == "OraclePDC"].norm_CBF, 1.0)
    assert np.allclose(per[per.estimator == "NoMemory"].norm_CBF, 0.0)
    # clean, unambiguous replies: Count is exact on labelled domains, so it beats L0
    mean = per.groupby("estimator").CBF.mean()
    assert mean["Count"] > mean["NoMemory"]
    assert by.loc[("0", "Count"), "n_labels"] > 0
    pooled = score_pooled(_turns(), ["OraclePDC"])
    assert pooled.CBF.iloc[0] == pytest.approx(1.0)


def test_session_bootstrap_se_matches_analytic():
    rng = np.random.default_rng(3)
    v = rng.normal(0.7, 0.05, 50)
    per = pd.DataFrame({"model": "m", "session_id": [str(i) for i in range(50)], "estimator": "X", "CBF": v})
    r = session_bootstrap(per, "CBF", n_boot=2000, seed=0).iloc[0]
    assert r.estimate == pytest.approx(v.mean())
    assert r.se == pytest.approx(v.std(ddof=0) / np.sqrt(50), rel=0.1)
    assert r.ci_low < v.mean() < r.ci_high


def test_paired_cluster_bootstrap_identical_estimators_give_zero():
    t = _turns()
    r = paired_cluster_bootstrap(t, "Count", "Count", "CBF", n_boot=30, seed=0).iloc[0]
    assert r.estimate == 0 and r.se == 0
    r = paired_cluster_bootstrap(t, "OraclePDC", "NoMemory", "CBF", n_boot=30, seed=0).iloc[0]
    assert r.estimate > 0 and r.ci_low > 0 and r.se > 0
