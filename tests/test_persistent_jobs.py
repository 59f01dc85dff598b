"""Persistent-calibration workflow jobs (SPEC §1): variant definitions against the paper's
text, the SC job on a scripted backend, a variant job on a tiny real GPT-2, method assembly
and metrics, table assembly with hand-checkable cells and marks, Table 19's statistics against
scipy, and the dry-run of the paper config."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfknow.protocols.persistent import catalog as C
from selfknow.protocols.persistent import jobs as J
from selfknow.protocols.persistent import metrics as PM
from selfknow.protocols.persistent import tables as T
from selfknow.protocols.persistent import findings as PF
from selfknow.protocols.persistent import variance as VAR
from selfknow.protocols.persistent import variants as V
from selfknow.protocols.persistent.inputs import EvalFiles, Evaluation, MetricFiles, ScInput, ScTable
from fakes import ScriptedLM

REPO = Path(__file__).resolve().parents[1]
TR, EV = ["C1", "C2"], ["C3", "C4"]


# --------------------------------------------------------------------------------------------
# variant definitions (§3.1.1, §3.2, §4 and Tables 3-4 of the paper)
# --------------------------------------------------------------------------------------------
def _adapters(plan):
    return {a.name: (a.views, dict(a.data), a.n_answers, a.random_labels) for a in plan.adapters}


def test_nonoracle_multi_trains_on_training_checkpoints_and_scores_ablations():
    plan = V.plan_variant("nonoracle_multi", TR, EV)
    # one adapter on C1 and C2, each with its own top-2 answers
    assert _adapters(plan) == {"multi": (("C1", "C2"), {"C1": ("C1",), "C2": ("C2",)}, 2, ())}
    got = {(s.scorer, s.target) for s in plan.scorings}
    # own: C3, C4; surrogate: C2's model on C3/C4's answers; copy: C2 on its own answers
    assert got == {("C3", "C3"), ("C4", "C4"), ("C2", "C3"), ("C2", "C4"), ("C2", "C2")}
    assert plan.train_data == ("C1", "C2")


def test_single_multi_respective_and_n1_variants():
    assert _adapters(V.plan_variant("nonoracle_single", TR, EV)) == {"single": (("C2",), {"C2": ("C2",)}, 2, ())}
    assert _adapters(V.plan_variant("nonoracle_single_n1", TR, EV))["single"][2] == 1
    assert _adapters(V.plan_variant("oracle_multi", TR, EV)) == {"multi": (("C3", "C4"), {"C3": ("C3",), "C4": ("C4",)}, 2, ())}
    resp = V.plan_variant("oracle_respective", TR, EV)
    assert _adapters(resp) == {"C3": (("C3",), {"C3": ("C3",)}, 2, ()), "C4": (("C4",), {"C4": ("C4",)}, 2, ())}
    # at inference the respective adapter is used
    assert {(s.adapter, s.scorer, s.target) for s in resp.scorings} == {("C3", "C3", "C3"), ("C4", "C4", "C4")}
    assert all(a.n_answers == 1 for a in V.plan_variant("oracle_respective_n1", TR, EV).adapters)


def test_table4_ablations_match_the_paper():
    # single-checkpoint data: C3's data for both C3 and C4 (one adapter, both views)
    sd = V.plan_variant("oracle_single_data", TR, EV)
    assert _adapters(sd) == {"multi": (("C3", "C4"), {"C3": ("C3",), "C4": ("C3",)}, 2, ())}
    # pooled data: respective adapters, each on the data pooled over C3 and C4
    po = V.plan_variant("oracle_pooled", TR, EV)
    assert _adapters(po) == {"C3": (("C3",), {"C3": ("C3", "C4")}, 2, ()),
                             "C4": (("C4",), {"C4": ("C3", "C4")}, 2, ())}


def test_transfer_and_random_label_variants():
    tr = V.plan_variant("transfer", TR, EV)
    assert [a.name for a in tr.adapters] == TR + EV and all(a.n_answers == 1 for a in tr.adapters)
    assert len(tr.scorings) == 16 and tr.hidden_states
    rl = V.plan_variant("random_label", TR, EV)
    # the authors' _ncand2_random configs: top-2 answers ("n_max_cand: 2"); consecutive pairs
    # (scripts/train.sh trains i, i+1)
    assert _adapters(rl)["C2+C3"] == (("C2", "C3"), {"C2": ("C2",), "C3": ("C3",)}, 2, ("C3",))
    assert [a.name for a in rl.adapters] == ["C1+C2", "C2+C3", "C3+C4"]
    assert len(V.plan_variant("random_label", TR, EV, pair_mode="all").adapters) == 6


def test_n_answers_is_every_variants_n_max_cand():
    # the authors' configs: _5k (no n_max_cand: 1) for n1 and transfer, _ncand2* for the rest
    want = {v: 1 if v.endswith("_n1") or v == "transfer" else 2 for v in V.VARIANTS}
    assert {v: V.n_answers(v) for v in V.VARIANTS} == want
    assert sum(n == 1 for n in want.values()) == 5
    for v in V.VARIANTS:
        assert {a.n_answers for a in V.plan_variant(v, TR, EV).adapters} == {want[v]}
    with pytest.raises(ValueError, match="unknown variant"):
        V.n_answers("oracle")


def test_transfer_slices_are_the_single_answer_variants_with_twin_adapters():
    # two training checkpoints: C2's single adapter and the respective ones are transfer's own
    assert V.transfer_slices(TR, EV) == ("nonoracle_single_n1", "oracle_respective_n1")
    twins = V.plan_variant("nonoracle_single_n1", TR, EV).twin_scorings(V.plan_variant("transfer", TR, EV))
    assert {(s.adapter, t.adapter, t.scorer, t.target) for s, t in twins.items()} == {
        ("single", "C2", "C3", "C3"), ("single", "C2", "C4", "C4")}
    # one training checkpoint: multi-checkpoint training on it is single-checkpoint training
    assert V.transfer_slices(["C1"], ["C2", "C3", "C4"]) == (
        "nonoracle_multi_n1", "nonoracle_single_n1", "oracle_respective_n1")
    # two answers, pooled data, surrogate scorings: no twin
    tr = V.plan_variant("transfer", TR, EV)
    assert all(V.plan_variant(v, TR, EV).twin_scorings(tr) is None
               for v in ("oracle_respective", "oracle_pooled", "nonoracle_multi_n1", "oracle_multi_n1"))


def test_transfer_scorings_only_for_table18_variants():
    p = V.plan_variant("oracle_multi", TR, EV, with_transfer=True)
    assert p.test_targets(V.TRANSFER) == EV
    assert V.plan_variant("oracle_respective", TR, EV, with_transfer=True).test_targets(V.TRANSFER) == []
    # the surrogate/copy scorings are not repeated on the transfer dataset
    q = V.plan_variant("nonoracle_multi", TR, EV, with_transfer=True)
    assert {(s.scorer, s.target) for s in q.scorings if s.dataset == V.TRANSFER} == {("C3", "C3"), ("C4", "C4")}


def test_plan_variant_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown variant"):
        V.plan_variant("nope", TR, EV)
    with pytest.raises(ValueError, match="both training and evaluation"):
        V.plan_variant("oracle_multi", ["C1", "C3"], EV)


# --------------------------------------------------------------------------------------------
# self-consistency job (scripted backend)
# --------------------------------------------------------------------------------------------
def _items(n, split="test"):
    return pd.DataFrame({"item_id": [f"q{i}" for i in range(n)], "dataset": "d", "domain": "x",
                         "question": [f"Question {i}?" for i in range(n)], "choices": None,
                         "answer": [f"a{i}" for i in range(n)], "aliases": [[f"a{i}", f"alias{i}"] for i in range(n)],
                         "split": split})


def test_sc_job_groups_weights_and_judges(tmp_path, monkeypatch):
    items, train = _items(4), _items(8, "train")
    items.to_parquet(tmp_path / "test.parquet")
    train.to_parquet(tmp_path / "train.parquet")

    seen = []

    def beams(prompt):
        seen.append(prompt)
        i = int(prompt.rsplit("Question ", 1)[1].split("?")[0])
        # correct answer "a{i}" (0.5) vs "wrong" (0.3) + "Wrong." (0.2, same group)
        return [(f" a{i}\nQuestion", math.log(0.5)), (" wrong", math.log(0.3)), (" Wrong.", math.log(0.2))]

    lm = ScriptedLM(lambda p: "", beams=beams)
    monkeypatch.setattr(J, "load_lm", lambda *a, **k: lm)
    test = J.SplitIO(str(tmp_path / "test.parquet"), 3, str(tmp_path / "beams.parquet"), str(tmp_path / "sc.parquet"))
    out = J.sc_job({"test": test}, str(tmp_path / "train.parquet"), {"name": "m"}, "C1",
                   n_shots=2, icl_by_domain=False, seed=0, num_beams=3, max_new_tokens=8, equivalence="normalised",
                   normalisation="squad", prompt_label="Question", cache_dir=str(tmp_path / "cache"), correctness="exact")
    sc = pd.read_parquet(tmp_path / "sc.parquet")
    assert out["test_items"] == 3 and len(pd.read_parquet(tmp_path / "beams.parquet")) == 9
    # "wrong" + "Wrong." = 0.5 ties the correct 0.5: first appearance (the correct one) wins
    assert sc["confidence"].tolist() == pytest.approx([0.5] * 3)
    assert sc["correct"].all()
    assert [list(g) for g in sc["group_correct"]] == [[True, False]] * 3
    assert [list(g) for g in sc["group_labels"]] == [["R", "W"]] * 3 and set(sc["judge_status"]) == {"exact"}
    # two fixed in-context examples from the train split precede every question
    assert len(seen) == 3 and all(p.count("Answer:") == 3 and p.endswith("?\nAnswer:") for p in seen)


def test_llm_judge_labels_a_paraphrase_right_and_counts_what_it_cannot_label(tmp_path, monkeypatch):
    items = _items(4)
    items.to_parquet(tmp_path / "test.parquet")
    _items(8, "train").to_parquet(tmp_path / "train.parquet")

    def beams(prompt):
        i = int(prompt.rsplit("Question ", 1)[1].split("?")[0])
        # a paraphrase of the reference "a{i}" that exact match rejects, and a wrong answer
        return [(f" the a{i} thing", math.log(0.6)), (" wrong", math.log(0.4))]

    # the judge: right/wrong for q0 and q1, a refusal for q2, half an answer for q3
    replies = {"0": "1. R\n2. W", "1": "1. R\n2. W", "2": "Sorry, I cannot grade these answers.", "3": "1. R"}
    judge = ScriptedLM(lambda p: replies[p.split("Question: Question ")[1][0]], model_id="judge-lm")
    monkeypatch.setattr(J, "load_lm", lambda *a, **k: ScriptedLM(lambda p: "", beams=beams))
    monkeypatch.setattr(J, "load_judge", lambda spec, cache_dir, labels: judge)
    spec = {"name": "judge-lm", "backend": "hf", "chat": True}
    run = dict(n_shots=0, icl_by_domain=False, seed=0, num_beams=2, max_new_tokens=8,
               equivalence="normalised", normalisation="squad", prompt_label="Question", cache_dir=str(tmp_path / "cache"))
    split = lambda beams, sc: {"test": J.SplitIO(str(tmp_path / "test.parquet"), 4, str(tmp_path / beams),  # noqa: E731
                                                 str(tmp_path / sc))}
    exact = J.sc_job(split("b0.parquet", "exact.parquet"), str(tmp_path / "train.parquet"), {"name": "m"}, "C1",
                     correctness="exact", **run)
    # under the LLM judge the beam-search job asks no judge: it leaves the candidates unlabelled
    cand = J.sc_job(split("b1.parquet", "cand.parquet"), str(tmp_path / "train.parquet"), {"name": "m"}, "C1",
                    correctness="llm", **run)
    assert not judge.prompts and cand["test_items"] == 4
    assert list(pd.read_parquet(tmp_path / "cand.parquet").columns) == J.CANDIDATE_COLUMNS + ["model", "checkpoint",
                                                                                             "split"]
    out = J.judge_job({"test": J.JudgeIO(str(tmp_path / "test.parquet"), str(tmp_path / "cand.parquet"),
                                         str(tmp_path / "llm.parquet"))}, "m", "C1",
                      {"spec": spec, "labels": "generate", "multi_reference": False}, str(tmp_path / "cache"))
    em, llm = (pd.read_parquet(tmp_path / f).set_index("item_id").sort_index() for f in ("exact.parquet", "llm.parquet"))
    assert set(llm["checkpoint"]) == {"C1"} and set(llm["split"]) == {"test"}
    assert exact["test_accuracy"] == 0 and not em["correct"].any()        # exact match: the paraphrase is wrong
    assert llm["correct"].tolist() == [True, True, False, True]       # the judge: right
    assert [list(g) for g in llm["group_labels"]] == [["R", "W"], ["R", "W"], [None, None], ["R", None]]
    assert llm["judge_status"].tolist() == ["ok", "ok", "refused", "unparsable"]
    # one request per question, every candidate group numbered, against the reference answer only
    assert len(judge.prompts) == 4
    for p in judge.prompts:
        i = p.split("Question: Question ")[1][0]
        assert p.endswith(f"Question {i}?\nGround-truth answer: a{i}\nCandidate answers:\n1. the a{i} thing\n2. wrong")
    assert [out[f"test_{k}"] for k in ("refused", "unparsable", "R", "W", "unlabelled")] == [1, 1, 3, 2, 3]
    counts = J.judge_count_job({ScInput("main", "test", "C1"): str(tmp_path / "llm.parquet"),
                                ScInput("transfer", "train", "C2"): str(tmp_path / "exact.parquet")},
                               str(tmp_path / "counts.csv"))
    assert counts == {"tables": 2, "refused": 1, "unparsable": 1}
    rows = pd.read_csv(tmp_path / "counts.csv")
    assert rows[["dataset", "split", "checkpoint"]].values.tolist() == [["main", "test", "C1"],
                                                                       ["transfer", "train", "C2"]]
    note = T.judge_note(rows.iloc[:1])
    assert "1 refused, 1 unparsable" in note and "3 unlabelled (counted wrong, as N)" in note


def test_training_examples_take_top_candidates_weighted():
    sc = pd.DataFrame({"item_id": ["a", "b"], "question": ["qa", "qb"], "prediction": ["x", "z"],
                       "confidence": [0.6, 0.9], "correct": [True, False],
                       "group_answers": [["x", "y", "w"], ["z"]], "group_probs": [[0.6, 0.3, 0.1], [0.9]],
                       "group_members": [[["x"], ["y"], ["w"]], [["z"]]], "group_correct": [[True, False, False], [False]]})
    one = J.training_examples(sc, 1)
    assert one[["question_id", "answer", "correct"]].values.tolist() == [["a", "x", True], ["b", "z", False]]
    two = J.training_examples(sc, 2)
    assert two["answer"].tolist() == ["x", "y", "z"] and two["weight"].tolist() == pytest.approx([0.6, 0.3, 0.9])


def test_adapter_examples_build_each_view_from_its_plan():
    sc = {c: _sc_frame(["a", "b"], [0.6, 0.9], [c == "C3", True], pred=[f"{c}a", f"{c}b"]) for c in EV}
    spec = {"name": "m", "checkpoints": [{"name": c, "path": f"/w/{c}"} for c in TR + EV]}
    frame = lambda ex: ex[["question_id", "answer", "correct", "source"]].values.tolist()  # noqa: E731
    # Table 4 pooled data: each respective adapter sees every evaluation checkpoint's answers
    po = {a.name: a for a in V.plan_variant("oracle_pooled", TR, EV).adapters}
    c4 = J.adapter_examples(po["C4"], sc, spec, seed=0)
    assert list(c4) == ["C4"] and c4["C4"][0] == "/w/C4"
    assert frame(c4["C4"][1]) == [["a", "C3a", True, "C3"], ["b", "C3b", True, "C3"],
                                  ["a", "C4a", False, "C4"], ["b", "C4b", True, "C4"]]
    # Table 4 single-checkpoint data: both views, C3's answers for both
    (sd,) = V.plan_variant("oracle_single_data", TR, EV).adapters
    both = J.adapter_examples(sd, sc, spec, seed=0)
    assert [both[v][0] for v in EV] == ["/w/C3", "/w/C4"]
    assert frame(both["C4"][1]) == frame(both["C3"][1]) == [["a", "C3a", True, "C3"], ["b", "C3b", True, "C3"]]
    # random labels on the second view only, drawn from the seed
    sc_all = {c: _sc_frame([str(i) for i in range(200)], [0.5] * 200, [True] * 200) for c in TR + EV}
    rl = V.plan_variant("random_label", TR, EV).adapters[-1]
    first, second = rl.views
    ex = J.adapter_examples(rl, sc_all, spec, seed=3)
    assert ex[first][1]["correct"].all() and 0.4 < ex[second][1]["correct"].mean() < 0.6
    again = J.adapter_examples(rl, sc_all, spec, seed=3)
    assert ex[second][1]["correct"].tolist() == again[second][1]["correct"].tolist()
    with pytest.raises(KeyError, match="adapter 'C4'.*'C3'"):
        J.adapter_examples(po["C4"], {"C4": sc["C4"]}, spec, seed=0)


# --------------------------------------------------------------------------------------------
# method assembly and metrics
# --------------------------------------------------------------------------------------------
def _sc_frame(ids, conf, correct, pred=None):
    pred = pred or [f"p{i}" for i in ids]
    return pd.DataFrame({"item_id": ids, "question": [f"q{i}" for i in ids], "prediction": pred,
                         "confidence": conf, "correct": correct,
                         "group_answers": [[p] for p in pred], "group_probs": [[c] for c in conf],
                         "group_members": [[[p]] for p in pred], "group_correct": [[c] for c in correct]})


def test_assemble_methods_baselines_copy_and_surrogate():
    ids = ["i0", "i1", "i2"]
    ev = {"C3": _sc_frame(ids, [0.2, 0.6, 0.9], [False, True, True], ["x", "y", "z"]),
          "C4": _sc_frame(ids, [0.3, 0.5, 0.4], [True, True, False], ["u", "y", "w"])}
    c2 = _sc_frame(ids, [0.7, 0.8, 0.1], [True, True, False], ["u", "y", "z"])
    train = {"C1": _sc_frame(ids, [0.1, 0.5, 0.9], [False, True, True])}
    items, y, m = PM.assemble_methods(ev, ["C3", "C4"], train_sc=train, surrogate_sc=c2,
                                     equivalence=J.make_equivalence("normalised", normalisation="squad"))
    assert items.tolist() == ids
    np.testing.assert_array_equal(y, [[0, 1, 1], [1, 1, 0]])
    np.testing.assert_allclose(m["end_correct"][0], [[0, 0, 0], [1, 1, 1]])
    np.testing.assert_allclose(m["sc"][0], [[0.2, 0.6, 0.9], [0.3, 0.5, 0.4]])
    # copy: C2's confidence on its own answer, for both evaluation checkpoints
    np.testing.assert_allclose(m["sc_copy"][0], [[0.7, 0.8, 0.1]] * 2)
    # surrogate: C2's probability of the answer each evaluation checkpoint gave (0 if absent)
    np.testing.assert_allclose(m["sc_surrogate"][0], [[0, 0.8, 0.1], [0.7, 0.8, 0]])
    # post-hoc: isotonic fit on the training checkpoint's (0.1,0), (0.5,1), (0.9,1)
    np.testing.assert_allclose(m["sc_posthoc"][0], [[0.25, 1, 1], [0.5, 1, 0.75]])


def test_assemble_methods_variant_seeds_and_renames():
    ids = ["i0", "i1"]
    ev = {c: _sc_frame(ids, [0.5, 0.5], [True, False]) for c in EV}
    rows = []
    for seed in (1, 0):
        for c in EV:
            for i, item in enumerate(ids):
                rows.append({"variant": "oracle_multi", "seed": seed, "adapter": "multi", "scorer": c, "target": c,
                             "dataset": "main", "item_id": item, "answer": "", "correct": True,
                             "confidence": 0.1 * seed + 0.01 * i + (0.5 if c == "C4" else 0)})
    _, _, m = PM.assemble_methods(ev, EV, variant_frames=[pd.DataFrame(rows)])
    assert m["oracle"].shape == (2, 2, 2)
    np.testing.assert_allclose(m["oracle"][:, 1, 1], [0.51, 0.61])  # seeds sorted


def test_contrast_size_frame_counts_by_hand():
    y = np.array([[1, 0, 1, 0], [0, 1, 1, 1]])
    df = PM.contrast_size_frame(y, ["A", "B"], min_contrast=3)
    ab = df[(df.row == "A") & (df.col == "B")].iloc[0]
    ba = df[(df.row == "B") & (df.col == "A")].iloc[0]
    assert (ab["size"], ab["row_wrong_col_right"], ba["row_wrong_col_right"]) == (3, 2, 1)
    assert ab["used"]


def test_compute_metrics_points_and_replicates():
    rng = np.random.default_rng(0)
    y = (rng.random((3, 200)) < [[0.4], [0.5], [0.6]]).astype(float)
    good = np.clip(0.5 * y + 0.5 * rng.random((3, 200)), 0, 1)[None]
    m = {"end_correct": np.repeat(np.array([0, 0.5, 1.0])[:, None], 200, axis=1)[None], "sc": good}
    pts, reps, pairs = PM.compute_metrics(y, m, min_contrast=50, n_boot=40, n_boot_ece=0, seed=1)
    assert len(pairs) == 3
    eq1 = pts[pts.normaliser == "eq1"].set_index(["method", "metric"])["value"]
    assert eq1["end_correct", "delta0_b"] == pytest.approx(0.0)
    assert eq1["sc", "contrast_auc"] > 0.7
    assert reps["eq1|sc|contrast_auc"].shape == (40,) and "eq1|sc|full_ece" not in reps
    assert set(pts.normaliser) == {"eq1", "bt"}


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------
def _metric_file(values: dict, reps: dict | None = None) -> T.MetricFile:
    rows = [{"normaliser": "eq1", "method": m, "metric": k, "value": v}
            for m, d in values.items() for k, v in d.items()]
    return T.MetricFile(pd.DataFrame(rows), reps or {})


def test_table1_cells_and_marks_by_hand():
    from selfknow.stats.persistent.contrast import METRICS

    def vals(base):
        return {k: base for k in METRICS}

    b = 100
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.001, b)
    reps = {}
    point = {"end_correct": 0.1, "sc": 0.70, "nonoracle": 0.699, "oracle": 0.80}
    for m, v in point.items():
        for k in METRICS:
            reps[f"eq1|{m}|{k}"] = v + noise * (1 if m != "sc" else 1.0) + (0.0 if m != "nonoracle" else rng.normal(0, 0.2, b))
    f = _metric_file({m: vals(v) for m, v in point.items()}, reps)
    files = {("M1", "d", "d"): f, ("M2", "d", "d"): f}
    values, marks, _ = T.method_cells("table1", files, ["M1", "M2"], ["d"], "t")
    assert values["method"].tolist() == ["End-correct baseline", "Self-consistency", "Non-oracle training",
                                         "Oracle training"]
    assert values["M2 contrast AUC"].tolist() == pytest.approx([0.1, 0.70, 0.699, 0.80])
    col = marks["M1 Δ0b"].tolist()
    # oracle best; nonoracle's replicates are noisy -> not significantly worse; sc clearly worse.
    # Nothing separates oracle from non-oracle, so the default bolds nothing; the paper's rule
    # bolds the best by value
    assert col == ["", "", "tie", ""]
    from selfknow.report import tables as R

    try:
        R.set_bold_rule("paper")
        col = T.method_cells("table1", files, ["M1", "M2"], ["d"], "t")[1]["M1 Δ0b"].tolist()
    finally:
        R.set_bold_rule("separated")
    assert col[3] == "best" and col[1] == "" and col[0] == "" and col[2] == "tie"


def test_bold_only_a_separated_best_never_a_value_fixed_by_construction():
    from selfknow.stats.persistent.significance import separated_bold, significance_marks

    reps = {"a": np.array([0.80, 0.82, 0.78, 0.81]), "b": np.array([0.60, 0.61, 0.59, 0.62]),
            "c": np.array([0.79, 0.83, 0.77, 0.80])}
    point = {"a": 0.80, "b": 0.60, "c": 0.795}
    marks = significance_marks(point, reps, higher_is_better=True)
    assert marks == {"a": "best", "b": "", "c": "tie"}
    assert separated_bold(marks, reps) == {"a": "", "b": "", "c": "tie"}
    two = {k: reps[k] for k in ("a", "b")}
    assert separated_bold(significance_marks({"a": 0.8, "b": 0.6}, two, higher_is_better=True), two) == {
        "a": "best", "b": ""}
    # an ECE of 0 in every replicate is fixed by construction: separated from the rest, never bold
    zero = {"a": np.zeros(4), "b": np.array([0.10, 0.12, 0.11, 0.13])}
    m = significance_marks({"a": 0.0, "b": 0.11}, zero, higher_is_better=False)
    assert m["a"] == "best" and separated_bold(m, zero) == {"a": "", "b": ""}
    assert separated_bold({"a": "best+tie", "b": "best+tie"}, two) == {"a": "tie", "b": "tie"}
    # a separated best whose own 95 % interval includes chance is the best of estimators that show
    # nothing: no bold (Table 13's non-oracle Δ 0.012 [-0.001, 0.024] on the cold run of 8d7f142)
    near = {"a": np.linspace(-0.001, 0.025, 41), "b": np.linspace(-0.021, 0.005, 41)}
    m = significance_marks({"a": 0.012, "b": -0.008}, near, higher_is_better=True)
    assert m == {"a": "best", "b": ""}
    assert separated_bold(m, near) == {"a": "best", "b": ""}              # a metric without a chance value
    assert separated_bold(m, near, chance=0.0) == {"a": "", "b": ""}
    assert separated_bold(m, {"a": near["a"] + 0.01, "b": near["b"]}, chance=0.0) == {"a": "best", "b": ""}


def test_the_table_note_flags_an_estimator_at_chance_with_its_interval_and_not_a_good_one():
    """Table 1 from `compute_metrics` on synthetic answers: SC and oracle training track
    correctness, non-oracle training is noise (AUC 0.5 in truth), the oracle of the second
    dataset is inverted (below chance). The note names exactly the two broken ones, each with its
    AUC and the 2.5-97.5 % percentile interval of its replicates; the good ones pass."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    files = {}
    for d in ("d1", "d2"):
        y = (rng.random((3, 300)) < [[0.4], [0.5], [0.6]]).astype(float)
        good = np.clip(0.5 * y + 0.5 * rng.random((3, 300)), 0, 1)[None]
        m = {"end_correct": np.repeat(np.array([0, 0.5, 1.0])[:, None], 300, axis=1)[None], "sc": good,
             "nonoracle": rng.random((1, 3, 300)), "oracle": good if d == "d1" else 1 - good}
        points, reps, _ = PM.compute_metrics(y, m, min_contrast=50, n_boot=400, n_boot_ece=0, seed=1)
        files[("M", d, d)] = T.MetricFile(points, reps)
        if d == "d1":  # the point value is the pooled AUC
            noise_auc, noise_reps = roc_auc_score(y.ravel(), m["nonoracle"][0].ravel()), reps["eq1|nonoracle|full_auc"]
            assert files[("M", d, d)].point("nonoracle", "full_auc") == pytest.approx(noise_auc)
    _, _, notes = T.method_cells("table1", files, ["M"], ["d1", "d2"], "t")
    lo, hi = np.quantile(noise_reps, [0.025, 0.975])
    assert lo < 0.5 < hi
    flagged = notes.split("no evidence of a working estimator: ", 1)[1]
    names = [entry.split(":")[0] for entry in flagged.rstrip(".").split("; ")]
    assert sorted(names) == ["nonoracle (M, d1)", "nonoracle (M, d2)", "oracle (M, d2)"]
    assert f"nonoracle (M, d1): {noise_auc:.3f} [{lo:.3f}, {hi:.3f}], includes 0.5" in flagged
    assert "oracle (M, d2)" in flagged and flagged.split("oracle (M, d2): ")[1].split(";")[0].endswith("below chance")
    assert "Chance check: 3 of the 8 (method, model, dataset) results" in notes
    assert "95 % percentile bootstrap interval" in notes
    # all good: the note says so
    good_only = {k: T.MetricFile(f.points, {**f.replicates, **{r: np.full(10, 0.8) for r in f.replicates
                                                                 if r.endswith("|full_auc")}})
                 for k, f in files.items()}
    _, _, notes = T.method_cells("table1", good_only, ["M"], ["d1", "d2"], "t")
    assert "excludes 0.5 for all 8 (method, model, dataset) results" in notes
    assert "trained methods averaged over seeds." in notes
    _, _, notes = T.method_cells("table1", good_only, ["M"], ["d1", "d2"], "t", seeds=[0, 1, 2])
    assert "trained methods averaged over 3 adapter seeds (0, 1, 2)." in notes


def test_table1_oracle_check_states_the_paired_difference_and_explains_a_shortfall():
    """Three checkpoints whose later ones know more: every contrast question of the used pairs
    (0,1), (0,2), (1,2) counted by hand. On d1 oracle training tracks correctness and
    non-oracle training is noise, so oracle is above (no explanation); on d2 the two swap, and
    the note gives the improvement share, the end-correct baseline and both Δ0b, each equal to
    the metric file's own value."""
    rng = np.random.default_rng(5)
    y = np.zeros((3, 400))
    y[0, :80] = 1
    y[1, :160] = 1
    y[1, 390:] = 1                          # 10 regressions of checkpoint 1 -> 2
    y[2, :240] = 1
    files, contrast = {}, {}
    for d in ("d1", "d2"):
        good = np.clip(0.6 * y + 0.4 * rng.random((3, 400)), 0, 1)[None]
        noise = rng.random((1, 3, 400))
        m = {"end_correct": np.repeat(np.array([0, 0.5, 1.0])[:, None], 400, axis=1)[None], "sc": good,
             "nonoracle": noise if d == "d1" else good, "oracle": good if d == "d1" else noise}
        points, reps, _ = PM.compute_metrics(y, m, min_contrast=50, n_boot=300, n_boot_ece=0, seed=2)
        files[("M", d, d)] = T.MetricFile(points, reps)
        contrast[("M", d, d)] = PM.contrast_size_frame(y, ["A", "B", "C"], 50)
    # by hand: (A,B) 90 improvements (items 80-159, 390-399); (A,C) 160 (80-239); (B,C) 80 (160-239)
    # and 10 regressions (390-399)
    assert T.improvement_share(contrast[("M", "d1", "d1")]) == (90 + 160 + 80, 90 + 160 + 90)
    note = T.oracle_check(files, contrast)
    assert note.endswith("are rows of tables/persistent/findings.")
    f1, f2 = files[("M", "d1", "d1")], files[("M", "d2", "d2")]
    d1 = f1.point("oracle", "contrast_auc") - f1.point("nonoracle", "contrast_auc")
    lo, hi = np.quantile(f1.reps("oracle", "contrast_auc") - f1.reps("nonoracle", "contrast_auc"), [0.025, 0.975])
    assert d1 > 0 and lo > 0
    assert f"M, d1: {d1:+.3f} [{lo:+.3f}, {hi:+.3f}]" in note
    why = note.split("not shown above non-oracle training (the paper's §4.1 finding), ", 1)[1]
    assert "d1" not in why and why.startswith("on d2 (M) 330 of the 340 contrast questions (97 %) are improvements")
    assert f"end-correct baseline reaches {f2.point('end_correct', 'contrast_auc'):.3f}" in why
    assert (f"{f2.point('nonoracle', 'delta0_b'):.3f} (non-oracle) and "
            f"{f2.point('oracle', 'delta0_b'):.3f} (oracle)") in why


def test_oracle_check_prints_a_difference_that_rounds_to_zero_without_a_sign():
    """Oracle 0.7000 against non-oracle 0.7004 (a difference of -0.0004, no replicates): "0.000",
    never "-0.000"; +0.0123 keeps its sign."""
    files = {("M", "d", "d"): _metric_file({"oracle": {"contrast_auc": 0.7}, "nonoracle": {"contrast_auc": 0.7004}}),
             ("M", "e", "e"): _metric_file({"oracle": {"contrast_auc": 0.7123}, "nonoracle": {"contrast_auc": 0.7}})}
    note = T.oracle_check(files, {})
    assert "M, d: 0.000 (no replicates); M, e: +0.012 (no replicates)." in note


def test_findings_rows_are_paired_replicate_differences_with_verdicts():
    """Hand-built contrast AUCs and replicates: oracle 0.70 below SC 0.78 with replicates that
    keep the order (disagrees), non-oracle 0.50 at chance (undecided), multi above single
    checkpoint (agrees); no GCM in the file, so its rows are named as not computed."""
    rng = np.random.default_rng(0)
    point = {"end_correct": 0.60, "sc": 0.78, "nonoracle": 0.50, "nonoracle_single": 0.45, "oracle": 0.70,
             "oracle_respective": 0.65}
    shared = rng.normal(0, 0.01, 200)
    reps = {f"eq1|{m}|contrast_auc": v + shared + (rng.normal(0, 0.03, 200) if m == "nonoracle" else 0)
            for m, v in point.items()}
    f = _metric_file({m: {"contrast_auc": v} for m, v in point.items()}, reps)
    table, note = PF.findings_table({("M", "d", "d"): f})
    by = dict(zip(table["comparison"], table.to_dict("records")))
    osc = by["M, d: Oracle − SC (contrast AUC)"]
    assert osc["difference"] == pytest.approx(-0.08) and osc["verdict"] == "disagrees"
    # the replicates share their noise: the paired difference is the constant -0.08, no interval
    assert osc["95 % interval"] == "none: every unit alike"
    chance = by["M, d: Non-oracle − chance (0.5) (contrast AUC)"]
    lo, hi = np.quantile(reps["eq1|nonoracle|contrast_auc"] - 0.5, [0.025, 0.975])
    assert chance["95 % interval"] == f"[{lo:+.3f}, {hi:+.3f}]" and chance["verdict"].startswith("undecided")
    assert by["M, d: Oracle multi − respective checkpoint (contrast AUC)"]["verdict"] == "agrees"
    assert by["M, d: Oracle − end-correct baseline (contrast AUC)"]["paper's direction"] == "> 0"
    assert len(table) == 8 and "Not computed in this configuration: GCM headroom: oracle − GCM, GCM − chance" in note
    # by hand: oracle above non-oracle, end-correct and respective, SC above end-correct agree; oracle
    # below SC and non-oracle 0.1 below end-correct disagree; non-oracle vs chance and vs single undecided
    assert "Of 8 comparisons: 4 agrees, 2 disagrees, 2 undecided (interval includes 0)." in note


def test_transfer_asymmetry_is_forward_minus_backward_auc_with_paired_resamples():
    """Three checkpoints, 40 questions each: forward cells rank perfectly (AUC 1), backward
    cells at random, the diagonal (left out) inverted; the difference is 1 minus the backward
    cells' mean AUC, and its interval, from one resample shared by every cell, is the
    percentile interval of the hand-computed per-resample differences."""
    from selfknow.protocols.persistent.learning_check import resample_indices
    from selfknow.stats.classification import auc

    rng = np.random.default_rng(1)
    order = ["c1", "c2", "c3"]
    y = (np.arange(40) % 2).astype(float)
    rows, backward = [], {}
    for i, a in enumerate(order):
        for j, c in enumerate(order):
            p = y * 0.8 + 0.1 if i < j else (1 - y if i == j else rng.random(40))
            if i > j:
                backward[(a, c)] = p
            rows += [{"adapter": a, "scorer": c, "target": c, "item_id": f"q{k:02d}", "correct": y[k],
                      "confidence": p[k]} for k in rng.permutation(40)]
    df = pd.DataFrame(rows)
    diff, lo, hi = PF.transfer_asymmetry(df, order, 300, 7)
    assert diff == pytest.approx(1 - np.mean([auc(p, y) for p in backward.values()]))
    idx = resample_indices(40, 300, 7)
    reps = []
    for r in idx:
        if 0 < y[r].sum() < 40:
            reps.append(1 - np.mean([auc(p[r], y[r]) for p in backward.values()]))
    assert (lo, hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))
    assert lo > 0
    table, _ = PF.findings_table({}, {"d": ("M", (diff, lo, hi))})
    assert table.iloc[0]["comparison"].startswith("M, d: forward − backward transfer")
    assert table.iloc[0]["verdict"] == "agrees"


def test_contrast_size_table_marks_unused_pairs():
    y = np.array([[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 1, 1]])
    df = T.contrast_size_table({"M": PM.contrast_size_frame(y, ["A", "B", "C"], 3)}, 3)
    assert df.loc[0, "#2"] == "3 (2)" and df.loc[1, "#1"] == "3 (1)" and df.loc[0, "#3"] == "2 (2)*"
    assert df.loc[0, "#1"] == "–"


def test_write_table_and_figure3_from_synthetic_files(tmp_path):
    from selfknow.stats.persistent.contrast import METRICS

    R = str(tmp_path)
    for evalset in ("main", "transfer"):
        p = T.metrics_paths(R, "M", "d", evalset)
        Path(p["metrics"]).parent.mkdir(parents=True, exist_ok=True)
        Path(p["contrast"]).parent.mkdir(parents=True, exist_ok=True)
        methods = [m.name for m in C.METHODS]
        rows = [{"normaliser": n, "method": m, "metric": k, "value": 0.5}
                for n in ("eq1", "bt") for m in methods for k in METRICS]
        pd.DataFrame(rows).to_parquet(p["metrics"])
        np.savez(p["replicates"], **{f"eq1|{m}|{k}": np.full(10, 0.5) for m in methods for k in METRICS})
        PM.contrast_size_frame(np.array([[1, 0, 1], [0, 1, 1]]), ["A", "B"], 1).to_parquet(p["contrast"])
    files = {Evaluation("M", "d", e): EvalFiles(*(T.metrics_paths(R, "M", "d", e)[k]
                                                  for k in ("metrics", "replicates", "contrast")), f"{R}/judge_{e}.csv")
             for e in ("main", "transfer")}
    counts = {"main": {"judge": "exact match", "questions": 3, "refused": 0, "unparsable": 0, "no candidates": 0,
                       "candidates": 6, "R": 2, "W": 4, "N": 0, "unlabelled": 0},
              "transfer": {"judge": "judge-lm", "questions": 5, "refused": 1, "unparsable": 2, "no candidates": 0,
                           "candidates": 9, "R": 3, "W": 2, "N": 1, "unlabelled": 3}}
    for e, row in counts.items():
        pd.DataFrame([{"dataset": "main", "split": "test", "checkpoint": "C1", **row}]).to_csv(
            files[Evaluation("M", "d", e)].judge, index=False)
    for name in ("table1", "table4", "table8", "table10", "table12", "table14", "table18", "findings"):
        out = T.table_job(name, files, ["M"], ["d"], "t", f"{R}/{name}.csv", f"{R}/{name}.md", min_contrast=1,
                          min_contrast_transfer=1)
        assert out["rows"] > 0 and out.get("nan_cells", 0) == 0
    md = Path(f"{R}/table18.md").read_text()
    # every cell 0.5 in every replicate: nothing is separated, so nothing is bold; all tie with the best
    assert "d → t" in md and "**" not in md and "<u>0.500</u>" in md
    findings = pd.read_csv(f"{R}/findings.csv")
    assert set(findings["verdict"]) == {"no difference on any unit"}
    # who labelled the answers: the transfer tables count the judge's refusals and unparsable replies
    assert ("LLM judge judge-lm (§A.5, one request per question) on 5 questions: 1 refused, 2 unparsable, 0 without "
            "a candidate; of 9 candidate answers 3 R, 2 W, 1 N, 3 unlabelled") in md
    assert "normalised exact match with aliases (judge.correctness: exact)" in Path(f"{R}/table8.md").read_text()


def test_reliability_frame_takes_the_first_seed_pooled_over_checkpoints_in_panel_order():
    y = np.array([[0, 1, 1], [1, 0, 0]], dtype=float)
    sc = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])[None]
    oracle = np.stack([np.full((2, 3), 0.7), np.full((2, 3), 0.9)])  # seeds 0 and 1
    df = PM.reliability_frame(y, {"oracle": oracle, "sc": sc, "nonoracle_multi_n1": sc})  # an ablation: no panel
    assert list(pd.unique(df["panel"])) == ["Self-consistency", "Oracle training"]
    got = df[df["panel"] == "Self-consistency"]
    assert got["confidence"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert got["correct"].tolist() == [0, 1, 1, 1, 0, 0]
    assert df.loc[df["panel"] == "Oracle training", "confidence"].tolist() == pytest.approx([0.7] * 6)
    with pytest.raises(ValueError, match="no method"):
        PM.reliability_frame(y, {"nonoracle_multi_n1": sc})
    with pytest.raises(ValueError, match="'sc'"):
        PM.reliability_frame(y, {"sc": sc[:, :1]})


def _reliability_inputs(tmp_path, n: int = 60) -> tuple[dict, list, list]:
    """SC tables, the two variants and the GCM that `reliability_job` reads, for checkpoints
    TR (training) and EV (evaluation), with confidences that track correctness."""
    from selfknow.records import write_parquet

    rng = np.random.default_rng(7)
    ids = [f"i{k:02d}" for k in range(n)]
    sc_paths, frames = {}, {}
    for split, ckpts in (("train", TR), ("test", TR[-1:] + EV)):
        for c in ckpts:
            correct = rng.random(n) < 0.5
            conf = np.clip(0.3 + 0.4 * correct + rng.normal(0, 0.15, n), 0.01, 0.99)
            pred = [f"a{k}" if ok else f"w{k}{c}" for k, ok in enumerate(correct)]
            frames[(split, c)] = _sc_frame(ids, conf.tolist(), correct.tolist(), pred)
            path = tmp_path / "sc" / f"{split}_{c}.parquet"
            write_parquet(frames[(split, c)], path)
            sc_paths[ScInput("main", split, c)] = str(path)
    last = TR[-1]
    variant_paths = []
    for variant, pairs in (("nonoracle_multi", [(c, c) for c in EV] + [(last, c) for c in EV] + [(last, last)]),
                           ("oracle_multi", [(c, c) for c in EV])):
        rows = []
        for scorer, target in pairs:
            t = frames[("test", target)]
            rows.append(pd.DataFrame({"variant": variant, "seed": 0, "adapter": "multi", "scorer": scorer,
                                      "target": target, "dataset": "main", "item_id": t["item_id"],
                                      "answer": t["prediction"], "correct": t["correct"],
                                      "confidence": np.clip(t["confidence"] + rng.normal(0, 0.05, n), 0, 1)}))
        variant_paths.append(str(tmp_path / f"{variant}.parquet"))
        write_parquet(pd.concat(rows, ignore_index=True), variant_paths[-1])
    gcm = pd.concat([frames[(split, c)][["item_id", "correct", "confidence"]].assign(seed=0, method="gcm", target=c, split=split)
                     for split, ckpts in (("test", EV), ("train", TR)) for c in ckpts], ignore_index=True)
    write_parquet(gcm, tmp_path / "gcm.parquet")
    return sc_paths, variant_paths, [str(tmp_path / "gcm.parquet")]


def test_reliability_job_draws_one_full_panel_per_method_with_its_band(tmp_path, monkeypatch):
    drawn = []  # the summaries of what the job drew (taken before the figure is closed)
    grid = J.reliability_grid
    monkeypatch.setattr(J, "reliability_grid", lambda *a, **k: drawn.append(grid(*a, **k)) or drawn[-1])
    sc_paths, variant_paths, gcm_paths = _reliability_inputs(tmp_path)
    png = tmp_path / "figures" / "reliability" / "M" / "d.png"
    out = J.reliability_job(EV, TR, sc_paths, variant_paths, gcm_paths, str(png), title="Reliability: M on d",
                            seed=0, equivalence="normalised", normalisation="squad", n_boot=20,
                            provenance={"config_hash": "abc"})
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert json.loads(png.with_suffix(".json").read_text())["config_hash"] == "abc"
    labels = [v for k, v in C.reliability_panels().items() if not k.startswith("gcm_trained")]
    assert out["panels"] == len(labels) == 11 and out["items"] == 60 and out["checkpoints"] == len(EV)
    assert list(out["smooth_ece"]) == labels and all(0 <= v <= 1 for v in out["smooth_ece"].values())
    # every panel labelled and non-empty, in panel order, on all the pooled answers, each with
    # four series: the diagonal, the SmoothECE curve, its bootstrap band and the binned points
    (s,) = drawn
    assert s.path == str(png) and s.suptitle == "Reliability: M on d"
    assert [a.title for a in s.axes] == [f"{label} (n={len(EV) * 60})" for label in labels]
    for a in s.axes:
        assert a.has_data and a.xlabel == "confidence" and a.ylabel == "accuracy"
        # the diagonal; the band's outline, the curve's dots, the bins; the band's density-faded fill
        assert len(a.series) == 4 and a.n_lines == 1 and a.n_collections == 3 and a.n_images == 1, a
        assert any(x.startswith("smoothed, SmoothECE") for x in a.series)
        assert any(x.startswith("95 % bootstrap band (20 resamples)") for x in a.series)
    # without the GCM (no `persistent.gcm_model`) its two panels are left out
    out = J.reliability_job(EV, TR, sc_paths, variant_paths, [], str(tmp_path / "no_gcm.png"), title="t", seed=0,
                            equivalence="normalised", normalisation="squad", n_boot=5)
    assert out["panels"] == 9 and not {"GCM", "GCM post-hoc"} & set(out["smooth_ece"])


def test_transfer_matrices_auc():
    rows = []
    for a in ("A", "B"):
        for c in ("A", "B"):
            # adapter A ranks perfectly on both, adapter B inverts on A
            conf = [0.9, 0.1] if (a == "A" or c == "B") else [0.1, 0.9]
            rows += [{"adapter": a, "scorer": c, "target": c, "item_id": i, "correct": y, "confidence": p}
                     for i, (y, p) in enumerate(zip([1, 0], conf))]
    df = pd.DataFrame(rows)
    left, right = T.transfer_matrices(df, df.assign(adapter=df["adapter"] + "+B"), ["A", "B"])
    assert left.loc["A", "A"] == 1 and left.loc["B", "A"] == 0 and left.loc["B", "B"] == 1
    assert list(right.index) == ["A + B (random)", "B + B (random)"]


def test_transfer_matrices_mark_cells_whose_interval_includes_chance():
    rng = np.random.default_rng(0)
    y = (rng.random(300) < 0.5).astype(float)
    good = y * 0.4 + rng.random(300) * 0.6  # AUC ~0.85
    rows = [{"adapter": a, "scorer": c, "target": c, "item_id": i, "correct": y[i],
             "confidence": (good if a == "A" else rng.random(300))[i]}
            for a in ("A", "B") for c in ("A", "B") for i in range(300)]
    df = pd.DataFrame(rows)
    left, right, chance, chance_right = T.transfer_matrices(df, df.assign(adapter=df["adapter"] + "+B"), ["A", "B"],
                                                            n_boot=400, seed=3)
    assert not chance.loc["A"].any() and chance.loc["B"].all()
    from selfknow.protocols.persistent.learning_check import bootstrap_auc

    conf = df[(df["adapter"] == "B") & (df["target"] == "A")]["confidence"].to_numpy()
    lo, hi = bootstrap_auc(conf, y, 400, 3)
    assert lo < 0.5 < hi and left.loc["B", "A"] == pytest.approx(T_auc(conf, y))
    assert chance_right.shape == right.shape and chance_right.loc["A + B (random)"].eq(False).all()
    assert len(T.transfer_matrices(df, df, ["A", "B"])) == 2  # no resamples: no marks


def T_auc(conf, y):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(y, conf)


# --------------------------------------------------------------------------------------------
# Table 7 and Figures 2 and 4
# --------------------------------------------------------------------------------------------
def _correct(values, ids=None) -> pd.Series:
    ids = ids or [f"q{i + 1}" for i in range(len(values))]
    return pd.Series(values, index=ids, dtype=float)


def test_accuracy_table_by_hand():
    correct = {("M", "c1", "a"): _correct([1, 0, 0, 1]), ("M", "c2", "a"): _correct([1, 1, 1, 0]),
               ("M", "c1", "t"): _correct([0, 0, 1]), ("M", "c2", "t"): _correct([1, 1, 1, 1, 0])}
    df = T.accuracy_table(correct, ["M"], {"M": ["c1", "c2"]}, 1, ["a", "t"])
    assert list(df.columns) == ["model", "checkpoint", "role", "a", "t"]
    assert list(df["role"]) == ["non-oracle training", "evaluation"]
    assert df["a"].tolist() == [50.0, 75.0]
    assert df["t"].tolist() == pytest.approx([100 / 3, 80.0])
    with pytest.raises(KeyError):
        T.accuracy_table(correct, ["M"], {"M": ["c1", "c2", "c3"]}, 1, ["a"])


#: three evaluation checkpoints on q1-q4 (q9: answered by A only, so in no contrast set);
#: pairs A-B {q1, q2}, A-C {q1, q2, q4}, B-C {q4}; q3 is right for all three
EVAL = {"A": _correct([1, 0, 1, 1, 1], ["q1", "q2", "q3", "q4", "q9"]), "B": _correct([0, 1, 1, 1]),
        "C": _correct([0, 1, 1, 0])}


@pytest.mark.parametrize("min_contrast, ids, pairs", [(1, ["q1", "q2", "q4"], 3), (2, ["q1", "q2", "q4"], 2),
                                                      (3, ["q1", "q2", "q4"], 1), (4, [], 0)])
def test_contrast_questions_are_the_union_of_the_retained_pairs(min_contrast, ids, pairs):
    got, n = T.contrast_questions(EVAL, ["A", "B", "C"], min_contrast)
    assert list(got) == ids and n == pairs


def _gap_metric_file(oracle_reps=None, gcm_reps=None) -> T.MetricFile:
    """Contrast-set AUC 0.8 for oracle training, 0.7 for the GCM, with the given replicates."""
    reps = None if oracle_reps is None else {"eq1|oracle|contrast_auc": oracle_reps, "eq1|gcm|contrast_auc": gcm_reps}
    return _metric_file({"oracle": {"contrast_auc": 0.8}, "gcm": {"contrast_auc": 0.7}}, reps)


def test_gcm_headroom_row_by_hand():
    # backbone right on q1 only of the contrast questions {q1, q2, q4}: error 2/3 (q3, not a
    # contrast question, would make it 3/4)
    backbone = _correct([1, 0, 0, 0])
    # paired replicates: the gap runs 0.00, 0.01, ..., 0.40; its 2.5 % and 97.5 % points are
    # 0.01 and 0.39 (linear interpolation at positions 1 and 39)
    row = T.gcm_headroom_row(_gap_metric_file(0.5 + np.arange(41) / 100, np.full(41, 0.5)), EVAL, ["A", "B", "C"],
                             backbone, 2)
    assert row["backbone_error_rate"] == pytest.approx(2 / 3)
    assert (row["contrast_questions"], row["pairs"]) == (3, 2)
    assert row["auc_gap"] == pytest.approx(0.1)
    assert (row["gap_lo"], row["gap_hi"]) == pytest.approx((0.01, 0.39))
    assert (row["gcm_contrast_auc"], row["gcm_lo"], row["gcm_hi"]) == pytest.approx((0.7, 0.5, 0.5))
    no_reps = T.gcm_headroom_row(_gap_metric_file(), EVAL, ["A", "B", "C"], backbone, 2)
    assert math.isnan(no_reps["gap_lo"]) and math.isnan(no_reps["gap_hi"])
    with pytest.raises(KeyError, match="no answer to 1 contrast questions"):
        T.gcm_headroom_row(_gap_metric_file(), EVAL, ["A", "B", "C"], backbone.drop("q4"), 2)
    none = T.gcm_headroom_row(_gap_metric_file(), EVAL, ["A", "B", "C"], backbone, 4)
    assert math.isnan(none["backbone_error_rate"]) and (none["contrast_questions"], none["pairs"]) == (0, 0)


def test_released_gcm_job_scores_p_yes_with_the_hub_adapter(tmp_path, monkeypatch):
    """`released_gcm_job` on a tiny GPT-2 (local dir, a chat template) with a random LoRA
    adapter stored in a hub cache under an adapter id: one frame, method "gcm", the evaluation
    checkpoints' test answers and the training checkpoint's train answers, each confidence the
    adapter model's softmax probability of "yes" after the rendered prompt (by hand: transformers
    + peft), and no training. A missing adapter is an error naming it."""
    import huggingface_hub.constants
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from model_fixtures import CORPUS, build_lora_adapter, build_tiny_gpt2
    from selfknow.protocols.persistent.prompts import released_gcm_prompt
    from selfknow.rehearsal import hub

    base = build_tiny_gpt2(tmp_path / "base", corpus=CORPUS + [released_gcm_prompt("q", "a") + " yes"] * 20)
    tok = AutoTokenizer.from_pretrained(base)
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    tok.save_pretrained(base)
    cache = tmp_path / "hf"
    hub.store(cache, "org/gcm", "main", build_lora_adapter(base, tmp_path / "adapter", seed=3))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    sc, qa = {}, {}
    for split, c in (("test", "C2"), ("test", "C3"), ("train", "C1")):
        q = [f"Question {c} {i}?" for i in range(3)]
        a = ["Paris", "blue", None]
        pd.DataFrame({"item_id": [f"{split}{i}" for i in range(3)], "question": q, "prediction": a,
                      "confidence": 0.5, "correct": [True, False, True], "group_answers": [["x"]] * 3,
                      "group_probs": [[1.0]] * 3, "group_members": [[0]] * 3,
                      "group_correct": [[True]] * 3}).to_parquet(tmp_path / f"{split}_{c}.parquet")
        sc[ScInput(V.MAIN, split, c)] = str(tmp_path / f"{split}_{c}.parquet")
        qa[c] = [released_gcm_prompt(x, y or "") for x, y in zip(q, a)]
    spec = {"name": "g", "backend": "hf", "path": str(base), "device": "cpu"}
    out = tmp_path / "gcm.parquet"
    summary = J.released_gcm_job(spec, {"hub_id": "org/gcm", "revision": "main"}, ["C1"], ["C2", "C3"], sc,
                                 str(out), cache_dir=None)
    df = pd.read_parquet(out)
    assert summary["rows"] == 9 and set(df["method"]) == {"gcm"} and "seed" not in df
    assert list(zip(df["split"], df["target"])) == [("test", "C2")] * 3 + [("test", "C3")] * 3 + [("train", "C1")] * 3
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(tmp_path / "adapter")).eval()
    (yes,) = tok.encode("yes", add_special_tokens=False)
    for c in ("C2", "C3", "C1"):
        ref = []
        for p in qa[c]:
            text = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True)
            enc = tok(text, return_tensors="pt", add_special_tokens=False)
            with torch.no_grad():
                logits = model(**enc).logits[0, -1]
                with model.disable_adapter():  # the adapter matters: without it P("yes") differs
                    assert not np.isclose(float(torch.softmax(model(**enc).logits[0, -1].float(), -1)[yes]),
                                          float(torch.softmax(logits.float(), -1)[yes]), rtol=1e-3)
            ref.append(float(torch.softmax(logits.float(), -1)[yes]))
        np.testing.assert_allclose(df.loc[df["target"] == c, "confidence"], ref, rtol=1e-5)
    with pytest.raises(FileNotFoundError, match="org/other@main"):
        J.released_gcm_job(spec, {"hub_id": "org/other", "revision": "main"}, ["C1"], ["C2", "C3"], sc,
                           str(out), cache_dir=None)


def _sc_file(path: Path, correct: pd.Series) -> str:
    n = len(correct)
    pd.DataFrame({"item_id": list(correct.index), "question": ["?"] * n, "prediction": ["x"] * n,
                  "confidence": [0.5] * n, "correct": correct.astype(bool).to_numpy(), "group_answers": [["x"]] * n,
                  "group_probs": [[1.0]] * n, "group_members": [[0]] * n,
                  "group_correct": [[bool(v)] for v in correct]}).to_parquet(path)
    return str(path)


def test_table7_and_figure2_jobs_from_synthetic_files(tmp_path):
    R = tmp_path
    sc = {(c, d): _sc_file(R / f"{c}_{d}.parquet", EVAL[c] * (1 if d == "a" else 0))
          for c in ("A", "B", "C") for d in ("a", "b")}
    paths = {ScTable("M", c, d, "test"): sc[(c, d)] for c in ("A", "B", "C") for d in ("a", "b")}
    paths.update({ScTable("M", c, "t", s): _sc_file(R / f"{c}_t_{s}.parquet",
                                                    _correct([1, 0] if s == "train" else [1, 1], [f"{s}1", f"{s}2"]))
                  for c in ("A", "B", "C") for s in ("train", "test")})
    out = T.table7_job(paths, ["M"], {"M": ["A", "B", "C"]}, 1, ["a", "b", "t"], str(R / "table7.csv"),
                       str(R / "table7.md"), transfer="t")
    t7 = pd.read_csv(R / "table7.csv")
    assert out["rows"] == 3 and t7["a"].tolist() == [80.0, 75.0, 50.0] and t7["t"].tolist() == [75.0] * 3
    assert "t: 4 questions (train and test splits)" in (R / "table7.md").read_text()
    # percentages print at one decimal, as the paper's Table 7 (the CSV keeps full precision): 2 of 3
    thirds = {ScTable("M", c, "a", "test"): _sc_file(R / f"thirds_{c}.parquet", _correct([1, 1, 0])) for c in "AB"}
    T.table7_job(thirds, ["M"], {"M": ["A", "B"]}, 1, ["a"], str(R / "t7b.csv"), str(R / "t7b.md"), transfer="t")
    assert pd.read_csv(R / "t7b.csv")["a"].tolist() == pytest.approx([200 / 3] * 2)
    assert (R / "t7b.md").read_text().count("| 66.7 |") == 2

    metric_paths = {}
    for d in ("a", "b"):
        base = R / f"metrics_{d}"
        _gap_metric_file(0.5 + np.arange(41) / 100, np.full(41, 0.5)).points.to_parquet(f"{base}.parquet")
        np.savez(f"{base}.npz", **{"eq1|oracle|contrast_auc": 0.5 + np.arange(41) / 100,
                                   "eq1|gcm|contrast_auc": np.full(41, 0.5)})
        metric_paths[Evaluation("M", d, "main")] = MetricFiles(f"{base}.parquet", f"{base}.npz")
    # backbone: checkpoint A's answers; on a, B and C differ on q4 only, which A gets right; on b
    # every checkpoint is wrong everywhere, so there is no contrast set and no error rate
    out = T.figure2_job(metric_paths, {ScTable("M", c, d, "test"): sc[(c, d)] for c, d in sc}, ["M"],
                        {"M": ["B", "C"]}, ["a", "b"], str(R / "f2.png"), str(R / "f2.csv"), str(R / "f2.md"),
                        min_contrast=1, backbone_model="M", backbone_ckpt="A")
    f2 = pd.read_csv(R / "f2.csv")
    assert out == {"points": 2, "nan_cells": 1}
    assert f2.loc[0, ["backbone_error_rate", "contrast_questions", "pairs"]].tolist() == [0.0, 1, 1]
    assert math.isnan(f2.loc[1, "backbone_error_rate"]) and f2.loc[1, "contrast_questions"] == 0
    assert f2.loc[0, "auc_gap"] == pytest.approx(0.1) and (R / "f2.png").stat().st_size > 5000
    # every GCM replicate is 0.5: its interval includes chance, which the note says for both points
    note = " ".join((R / "f2.md").read_text().split())
    assert "GCM not shown better than chance on contrast-set AUC" in note
    assert "M, a: 0.700 [0.500, 0.500]; M, b: 0.700 [0.500, 0.500]." in note


def test_figure2_note_names_only_a_gcm_at_chance():
    pts = pd.DataFrame({"model": ["M", "N"], "dataset": "a", "gcm_contrast_auc": [0.489, 0.80],
                        "gcm_lo": [0.447, 0.75], "gcm_hi": [0.531, 0.85]})
    note = T.gcm_chance_note(pts)
    assert note.endswith("working GCM: M, a: 0.489 [0.447, 0.531].")
    assert T.gcm_chance_note(pts.iloc[1:]) == ""


def test_transfer_figure_job_writes_the_figure_and_its_cells(tmp_path):
    rows = [{"adapter": a, "scorer": c, "target": c, "item_id": i, "correct": y, "confidence": p}
            for a in ("A", "B") for c in ("A", "B")
            for i, (y, p) in enumerate(zip([1, 0], [0.9, 0.1] if (a == "A" or c == "B") else [0.1, 0.9]))]
    df = pd.DataFrame(rows)
    df.to_parquet(tmp_path / "transfer.parquet")
    df.assign(adapter="A+B").to_parquet(tmp_path / "random.parquet")
    # as in the workflow, the figure and its data table in separate directories, each with its sidecar
    fig, tab = tmp_path / "figures", tmp_path / "tables"
    out = T.transfer_figure_job("figure4", str(tmp_path / "transfer.parquet"), str(tmp_path / "random.parquet"),
                                ["A", "B"], str(fig / "figure4.png"), str(tab / "figure4.csv"),
                                str(tab / "figure4.md"), model="M", dataset="d", provenance={"config_hash": "h"})
    data = pd.read_csv(tab / "figure4.csv")
    assert out == {"rows": 3, "nan_cells": 0}
    assert data[data["panel"] == "transfer"][["A", "B"]].to_numpy().tolist() == [[1, 1], [0, 1]]
    side = json.loads((fig / "figure4.json").read_text())
    # the title is the catalog entry's, formatted with the model and dataset, on the figure and its table
    title = C.TABLE["figure4"].title.format(model="M", dataset="d")
    assert side["figure"]["suptitle"] == title and len(side["figure"]["axes"]) == 2
    assert (tab / "figure4.md").read_text().startswith(f"### {title}")
    # the note states the colour scale the caption describes: the lower of 0.5 and the lowest cell
    # (here B on A, AUC 0) to the higher of 1 and the highest cell
    cells = data[["A", "B"]].to_numpy(float)
    lo, hi = min(0.5, np.nanmin(cells)), max(1.0, np.nanmax(cells))
    assert (lo, hi) == (0.0, 1.0)
    assert f"Colour scale of both panels: {lo:.3f} to {hi:.3f}." in (tab / "figure4.md").read_text()
    out = T.transfer_figure_job("figure4", str(tmp_path / "transfer.parquet"), str(tmp_path / "random.parquet"),
                                ["A", "B"], str(fig / "f.png"), str(tab / "f.csv"), str(tab / "f.md"), model="M",
                                dataset="d", n_boot=50)
    # two questions: a transfer cell's resamples with both classes rank as the full set does (AUC 1, or 0 for B
    # on A), so its interval lies off 0.5; the random panel's one adapter "A+B" pools A's and B's confidences
    # on A (AUC 0.5, at chance) and ranks perfectly on B
    assert out["cells_at_chance"] == 1
    assert "1 of 6 cells' intervals include 0.5 (in parentheses in the figure): random labels: A + B (random) " \
           "on A." in (tab / "f.md").read_text()


# --------------------------------------------------------------------------------------------
# Table 19 statistics
# --------------------------------------------------------------------------------------------
def test_total_variance_is_trace_of_covariance():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(5, 3, 4))  # seeds, questions, dims
    tv = VAR.total_variance(h)
    for q in range(3):
        assert tv[q] == pytest.approx(np.trace(np.cov(h[:, q, :].T)))


def test_spearman_with_index_matches_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    v = rng.normal(size=(6, 4, 7))
    v[:, 0, 0] = [1, 1, 2, 2, 3, 0]  # ties
    v[:, 1, 1] = 5.0  # constant -> NaN
    r = VAR.spearman_with_index(v)
    for a in range(4):
        for b in range(7):
            if (a, b) == (1, 1):
                assert np.isnan(r[a, b])
            else:
                assert r[a, b] == pytest.approx(spearmanr(np.arange(6), v[:, a, b]).statistic)


def test_variance_table_recovers_growing_variance():
    rng = np.random.default_rng(2)
    # 4 seeds, 5 checkpoints, 2 layers, 30 questions, 8 dims; spread grows with the checkpoint
    # in layer 1 and shrinks in layer 2
    scale = np.array([[1, 5], [2, 4], [3, 3], [4, 2], [5, 1]], dtype=float)[None, :, :, None, None]
    h = rng.normal(size=(4, 5, 2, 30, 8)) * scale
    df = VAR.variance_correlation_table(list(h))
    assert df["layer"].tolist() == [1, 2]
    assert df.loc[0, "mean_rho"] > 0.7 and df.loc[1, "mean_rho"] < -0.7


# --------------------------------------------------------------------------------------------
# a variant job on a tiny real GPT-2 (training + scoring + hidden states)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("peft")
    from model_fixtures import build_tiny_gpt2

    # one set of weights for every checkpoint: the job logic, not the model, is under test
    path = str(build_tiny_gpt2(tmp_path_factory.mktemp("tiny") / "m", seed=0))
    paths = {c: path for c in TR + EV}
    return {"name": "tiny", "backend": "hf", "path": paths["C1"],
            "checkpoints": [{"name": c, "path": p} for c, p in paths.items()]}


def _write_sc(tmp, ckpts, split, n=12):
    rng = np.random.default_rng(0)
    paths = {}
    for c in ckpts:
        ids = [f"q{i}" for i in range(n)]
        corr = list(rng.random(n) < 0.5)
        df = _sc_frame(ids, list(rng.random(n)), corr, [f"the cat {i}" for i in range(n)])
        df["group_answers"] = [[a, "the dog"] for a in df["prediction"]]
        df["group_probs"] = [[p, 0.1] for p in df["confidence"]]
        df["group_correct"] = [[c2, False] for c2 in corr]
        p = tmp / f"{c}_{split}.parquet"
        df.to_parquet(p)
        paths[ScInput("main", split, c)] = str(p)
    return paths


def test_variant_job_trains_scores_and_saves_hidden_states(tmp_path, tiny_model):
    tr, ck = ["C1"], ["C1"] + EV
    sc = {**_write_sc(tmp_path, ck, "train", n=8), **_write_sc(tmp_path, ck, "test", n=8)}
    out = J.variant_job("transfer", tiny_model, tr, EV, sc, str(tmp_path / "ad"), str(tmp_path / "conf.parquet"),
                        seed=0, cache_dir=str(tmp_path / "cache"), hidden_out=str(tmp_path / "h.npz"),
                        variance_items=5)
    conf = pd.read_parquet(tmp_path / "conf.parquet")
    assert out["adapters"] == 3 and len(conf) == 9 * 8
    assert conf["confidence"].between(0, 1).all()
    assert sorted(p.name for p in (tmp_path / "ad").iterdir()) == ck
    with np.load(tmp_path / "h.npz") as z:
        assert z["hidden"].shape == (3, 2, 5, 64)  # checkpoints, layers, questions, width
    # a second seed gives other adapters -> the statistics of Table 19 are defined
    J.variant_job("transfer", tiny_model, tr, EV, sc, str(tmp_path / "ad1"), str(tmp_path / "conf1.parquet"),
                  seed=1, cache_dir=str(tmp_path / "cache"), hidden_out=str(tmp_path / "h1.npz"), variance_items=5)
    tab = T.table19_job([str(tmp_path / "h.npz"), str(tmp_path / "h1.npz")], str(tmp_path / "t19.csv"),
                        str(tmp_path / "t19.md"), model="M", dataset="d")
    assert tab == {"layers": 2, "seeds": 2}
    t19 = pd.read_csv(tmp_path / "t19.csv")
    assert t19["mean_rho"].between(-1, 1).all()


def test_a_sliced_variant_equals_the_variant_trained_and_scored_alone(tmp_path, tiny_model):
    tr, ck = ["C1"], ["C1"] + EV
    sc = {**_write_sc(tmp_path, ck, "train", n=8), **_write_sc(tmp_path, ck, "test", n=8)}
    run = lambda v: J.variant_job(v, tiny_model, tr, EV, sc, str(tmp_path / v), str(tmp_path / f"{v}.parquet"),  # noqa: E731
                                  seed=0, cache_dir=str(tmp_path / "cache"))
    run("transfer")
    for variant in V.transfer_slices(tr, EV):
        run(variant)
        out = J.variant_slice_job(variant, tr, EV, str(tmp_path / "transfer.parquet"), str(tmp_path / "cut.parquet"))
        want = pd.read_parquet(tmp_path / f"{variant}.parquet")
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cut.parquet"), want)
        assert out["rows"] == len(want) == 2 * 8
    with pytest.raises(ValueError, match="'oracle_respective' has scorings the transfer variant lacks"):
        J.variant_slice_job("oracle_respective", tr, EV, str(tmp_path / "transfer.parquet"), str(tmp_path / "x.parquet"))


def _logged_residency(log_path: Path) -> tuple[int, int]:
    import re

    line = log_path.read_text().strip().splitlines()[-1]
    assert " done in " in line
    return tuple(map(int, re.search(r"base_loads=(\d+) peak_resident_bases=(\d+)", line).groups()))


# transfer: 3 single-view adapters x 3 scorers; oracle_multi: one adapter on the 2 evaluation
# checkpoints (multi-checkpoint training), scored by each
@pytest.mark.parametrize("variant, loads, pairs", [("transfer", 3 + 3, 9), ("oracle_multi", 2 + 2, 2)])
def test_variant_job_switches_adapters_on_one_resident_base(variant, loads, pairs, tmp_path, tiny_model):
    """The log reports one base load per training view and per scorer and never two bases
    alive at once; every confidence equals that of a freshly loaded model carrying the
    adapter alone."""
    from selfknow.models import load_lm
    from selfknow.models.hf import release_bases
    from selfknow.protocols.persistent.verbalized import predict_confidence
    from selfknow.runlog import job_log

    tr, ck = ["C1"], ["C1"] + EV
    sc = {**_write_sc(tmp_path, ck, "train", n=8), **_write_sc(tmp_path, ck, "test", n=8)}
    release_bases()
    log_path = tmp_path / "variant.log"
    with job_log(str(log_path), "variant") as summary:
        summary.update(J.variant_job(variant, tiny_model, tr, EV, sc, str(tmp_path / "ad"),
                                     str(tmp_path / "conf.parquet"), seed=0, cache_dir=str(tmp_path / "cache")))
    assert _logged_residency(log_path) == (loads, 1)
    conf = pd.read_parquet(tmp_path / "conf.parquet")
    assert len(conf) == pairs * 8 and conf.groupby(["adapter", "scorer"]).ngroups == pairs
    test = {c: pd.read_parquet(sc[ScInput("main", "test", c)]) for c in ck}
    for (adapter, scorer), got in conf.groupby(["adapter", "scorer"]):
        release_bases()
        lm = load_lm(tiny_model, scorer, cache_dir=None, adapter=str(tmp_path / "ad" / adapter))
        t = test[scorer]
        want = predict_confidence(lm, t["question"].tolist(), t["prediction"].tolist(), batch_size=32)
        np.testing.assert_array_equal(got["confidence"].to_numpy(), want)
    release_bases()


def test_judge_job_loads_only_the_judge(tmp_path, tiny_model, monkeypatch):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from selfknow.models.hf import release_bases
    from selfknow.models.registry import load_lm
    from selfknow.runlog import job_log

    # the real loader: a test that patches selfknow.models.load_lm while selfknow.stages.jobs is
    # first imported leaves its fake bound there
    monkeypatch.setattr("selfknow.stages.jobs.load_lm", load_lm)

    _items(3).to_parquet(tmp_path / "test.parquet")
    _items(4, "train").to_parquet(tmp_path / "train.parquet")
    judge_dir = tmp_path / "judge"  # the tiny model's tokenizer with room for the judge's prompt
    GPT2LMHeadModel(GPT2Config.from_pretrained(tiny_model["path"], n_positions=1024)).save_pretrained(judge_dir)
    AutoTokenizer.from_pretrained(tiny_model["path"]).save_pretrained(judge_dir)
    judge = {"spec": {"name": "judge", "backend": "hf", "path": str(judge_dir)}, "labels": "generate",
             "multi_reference": False}
    release_bases()
    with job_log(str(tmp_path / "sc.log"), "sc") as summary:
        test = J.SplitIO(str(tmp_path / "test.parquet"), 3, str(tmp_path / "beams.parquet"), str(tmp_path / "c.parquet"))
        summary.update(J.sc_job({"test": test}, str(tmp_path / "train.parquet"), tiny_model, "C3",
                                n_shots=0, icl_by_domain=False, seed=0, num_beams=2, max_new_tokens=4,
                                equivalence="normalised", normalisation="squad", prompt_label="Question", cache_dir=str(tmp_path / "cache"),
                                correctness="llm"))
    assert "judge_calls" not in summary
    release_bases()
    with job_log(str(tmp_path / "judge.log"), "judge") as summary:
        io = J.JudgeIO(str(tmp_path / "test.parquet"), str(tmp_path / "c.parquet"), str(tmp_path / "sc.parquet"))
        summary.update(J.judge_job({"test": io}, tiny_model["name"], "C3", judge, str(tmp_path / "cache")))
    assert summary["judge_calls"] == 3
    assert _logged_residency(tmp_path / "judge.log") == (1, 1)  # the judge alone
    release_bases()


@pytest.mark.parametrize("cuda, device", [(False, "cpu"), (True, "cuda")])
def test_adapter_training_resolves_an_auto_device_as_the_job_does(cuda, device, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert J._hparams({"device": "auto", "gpu": int(cuda)}, 2, {"epochs": 3}) == {
        "num_threads": 2, "device": device, "gpus": int(cuda), "epochs": 3}
    assert J._hparams({"device": "cuda:1", "gpu": 1, "dtype": "bfloat16"}, 1)["device"] == "cuda:1"


# --------------------------------------------------------------------------------------------
# workflow: the paper config dry-runs every persistent rule with GPU resources
# --------------------------------------------------------------------------------------------
def test_paper_config_dry_run_lists_persistent_rules_with_gpus(tmp_path):
    if shutil.which("snakemake") is None and not (Path(sys.executable).parent / "snakemake").exists():
        pytest.skip("snakemake not installed")
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text("\n".join([
        f'configfile: "{REPO}/config/paper.yaml"',
        f'include: "{REPO}/rules/common.smk"',
        f'include: "{REPO}/rules/models.smk"',
        f'include: "{REPO}/rules/data.smk"',
        f'include: "{REPO}/rules/persistent_common.smk"',
        f'include: "{REPO}/rules/persistent.smk"',
        "rule all:",
        "    input: [f'{R}/{f}' for f in P_CATALOG.targets(config)]",
    ]) + "\n")
    exe = str(Path(sys.executable).parent / "snakemake")
    res = subprocess.run([exe, "-n", "--snakefile", str(snakefile), "--directory", str(REPO), "--config",
                          f"results={tmp_path}/results"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    text = res.stdout + res.stderr
    jobs = {}  # rule -> resource lines of its jobs
    rule = None
    for ln in map(str.strip, text.splitlines()):
        if ln.startswith(("rule ", "localrule ")):
            rule = ln.split()[1].rstrip(":")
            jobs.setdefault(rule, [])
        elif ln.startswith("resources:") and rule:
            jobs[rule].append(ln)
    # the paper config scores the released GCM (persistent_gcm_released), it trains none
    assert "persistent_gcm" not in jobs and jobs["persistent_gcm_released"]
    assert all("gpu=1" in r for r in jobs["persistent_gcm_released"])
    for rule in ("persistent_sc", "persistent_variant", "persistent_transfer_variant", "persistent_gcm_released",
                 "persistent_metrics", "persistent_table1", "persistent_table7", "persistent_figure2",
                 "persistent_figure3", "persistent_figure4", "persistent_table19"):
        assert rule in jobs, rule
    # the models' GPU requests (Olmo 3 32B: 2, the others 1) reach every model-loading job
    # (the GCM asks for its own model's GPUs: rules/common.smk model_resources)
    for rule in ("persistent_sc", "persistent_variant", "persistent_transfer_variant"):
        assert jobs[rule] and all("gpu=1" in r or "gpu=2" in r for r in jobs[rule]), rule
    assert any("gpu=2" in r for r in jobs["persistent_variant"])
    assert not any("gpu=1" in r or "gpu=2" in r for r in jobs["persistent_metrics"])
