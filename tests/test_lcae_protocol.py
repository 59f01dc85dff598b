"""LCAE protocol logic with a scripted backend: prompting strategies, parsing, Stage 2."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fakes import ScriptedLM
from selfknow.protocols.lcae.examinees import STRATEGIES, answer_items
from selfknow.stages.judge import final_answer_letter
from selfknow.protocols.lcae.metacognition import (CONDITIONS, assess, assessment_schema,
                                                   parse_assessment)


def _items():
    return pd.DataFrame({"item_id": ["q1", "q2", "q3"], "question": ["Q one?", "Q two?", "Q three?"],
                         "choices": [["a", "b", "c", "d"]] * 3, "answer": ["B", "C", "A"], "domain": "med"})


@pytest.mark.parametrize("text,expected", [
    ("Let me think... Answer: C", "C"),
    ("Answer: A. On reflection, the answer is D", "D"),
    ("So the final answer is: B", "B"),
    ("B", "B"),
    ("I am not sure.", None),
    ("Answer: E", None),
])
def test_final_answer_letter_four_options(text, expected):
    assert final_answer_letter(text, 4) == expected


@pytest.mark.parametrize("text,expected", [
    # MedXpertQA has ten options A-J, so I and A are options: sentences that start with them,
    # or a lower-case article after "answer is", must not be read as answers
    ("I am not sure.", None),
    ("A 62-year-old man presents with fever; the likeliest cause is listed.", None),
    ("Hard to say, the answer is a drug that blocks the receptor.", None),
    ("Answer: I am not sure.", None),
    ("answer: j", None),
    ("Answer: J", "J"),
    ("Reasoning ... So the final answer is: (I).", "I"),
    ("**Answer:** A", "A"),
    ("Answer: B - pneumonia", "B"),
    ("Answer: K", None),
])
def test_final_answer_letter_ten_options(text, expected):
    assert final_answer_letter(text, 10) == expected


@pytest.mark.parametrize("text,p,letter", [
    ('{"error_probability": 0.3, "final_answer": "B"}', 0.3, "B"),
    ('Sure! {"error_probability": "35%", "final_answer": "c"} done', 0.35, "C"),
    ('{"error_probability": 80, "final_answer": "A"}', 0.8, "A"),
    ('error_probability: 0.25', 0.25, None),
    ('no idea', float("nan"), None),
])
def test_parse_assessment(text, p, letter):
    got_p, got_l = parse_assessment(text, 4)
    assert (np.isnan(p) and np.isnan(got_p)) or got_p == pytest.approx(p)
    assert got_l == letter


def test_chat_strategies_parse_and_count_unparsed():
    replies = {"Q one?": "Thinking. Answer: B", "Q two?": "Answer: A", "Q three?": "I refuse."}
    lm = ScriptedLM(lambda p: next(v for k, v in replies.items() if k in p))
    for s in STRATEGIES:
        out = answer_items(lm, _items(), s, chat=True, max_new_tokens=32)
        assert list(out["answer"][:2]) == ["B", "A"] and pd.isna(out["answer"][2])
        assert list(out["correct"]) == [True, False, False]
        assert list(out["status"]) == ["parsed", "parsed", "unparsed"]  # recorded and counted, never dropped
        assert len(out) == 3


def test_truncated_reply_is_counted_as_truncated_not_parsed():
    """A reply cut at the budget may end on a draft "Answer: X": no letter is read from it."""
    items = _items().assign(choices=[list("abcdefghij")] * 3, answer=["J", "I", "A"])
    replies = {"Q one?": ("Step 1 ... Answer: J", "stop"), "Q two?": ("I think Answer: I, but let me check", "length"),
               "Q three?": ("I am not sure.", "stop")}
    lm = ScriptedLM(lambda p: next(v for k, v in replies.items() if k in p))
    out = answer_items(lm, items, "cot", chat=True, max_new_tokens=32)
    assert list(out["status"]) == ["parsed", "truncated", "unparsed"]
    assert list(out["finish_reason"]) == ["stop", "length", "stop"]
    assert out["answer"][0] == "J" and out["answer"][1:].isna().all()
    assert list(out["correct"]) == [True, False, False]


def test_base_standard_picks_the_most_likely_option():
    # the option text "c" is the likeliest continuation of every cloze prompt
    seen = []

    def loglik(context, continuation):
        seen.append((context, continuation))
        return 0.0 if continuation == " c" else -3.0

    out = answer_items(ScriptedLM(lambda p: "x", loglik=loglik), _items(), "standard", chat=False, max_new_tokens=8)
    assert list(out["answer"]) == ["C"] * 3 and list(out["correct"]) == [False, True, False]
    assert sorted(seen)[:4] == [("Question: Q one?\nAnswer:", f" {c}") for c in "abcd"]
    p = np.exp([-3.0, -3.0, 0.0, -3.0]) / np.exp([-3.0, -3.0, 0.0, -3.0]).sum()
    assert out["raw"][0] == " ".join(f"{L}={x:.3f}" for L, x in zip("ABCD", p))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_base_strategies_use_the_recall(strategy):
    # the option follows the recalled text: recall "gamma" -> option "c", otherwise "a"
    def loglik(context, continuation):
        option = " c" if "gamma" in context else " a"
        return 0.0 if continuation == option else -5.0

    lm = ScriptedLM(lambda p: " gamma", beams=lambda p: [(" gamma", -0.1), (" gamma", -0.2), (" gamma", -0.3)],
                    loglik=loglik)
    out = answer_items(lm, _items(), strategy, chat=False, max_new_tokens=8)
    expected = "A" if strategy == "standard" else "C"
    assert list(out["answer"]) == [expected] * 3


def test_stage2_conditions_chat():
    items = _items()
    stage1 = pd.DataFrame({"item_id": items.item_id, "strategy": "standard", "answer": ["B", "A", None]})
    seen = []

    def respond(p):
        seen.append(p)
        if "Estimate the probability" in p:
            return '{"error_probability": 0.2, "final_answer": "C"}' if "Q two?" in p else "whatever"
        if "Fast or Slow" in p:
            return "Slow"
        if "Narrow" in p:
            return "Narrowing: B or C."
        raise AssertionError(f"unexpected prompt {p!r}")

    lm = ScriptedLM(respond)
    ie = {"q1": 0.1, "q2": 0.5, "q3": 0.9}
    for cond in CONDITIONS:
        seen.clear()
        out = assess(lm, items, stage1, cond, ie, chat=True, repeat=0, reflection="snapps_nap")
        assert list(out["condition"]) == [cond] * 3
        assert out["parsed"].tolist() == [False, True, False]
        assert out.loc[1, "error_p"] == pytest.approx(0.2) and out.loc[1, "final_answer"] == "C"
        assert out.loc[0, "final_answer"] == "B"  # unparsed keeps the Stage-1 answer
        assert bool(out.loc[1, "correct_final"])
        shows_signal = any("Difficulty signal" in p for p in seen)
        assert shows_signal == (cond in ("ids", "ids_dpr"))
        reflected = any("Narrow:" in p for p in seen)
        assert reflected == (cond in ("dpr", "ids_dpr"))
        assert (out["mode"] == "slow").all() == (cond in ("dpr", "ids_dpr"))


def test_stage2_asks_for_the_assessment_schema_of_each_item():
    """Only the Stage-2 assessment asks for JSON: its schema has the item's own option letters,
    and the reply it allows parses; the route and the reflection stay free text."""
    import json

    import jsonschema

    items = _items().assign(choices=[["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]])
    stage1 = pd.DataFrame({"item_id": items.item_id, "strategy": "standard", "answer": ["B", "A", "C"]})
    lm = ScriptedLM(lambda p: "Slow" if "Fast or Slow" in p else "Narrowing.")
    assess(lm, items, stage1, "ids_dpr", {"q1": 0.1, "q2": 0.5, "q3": 0.9}, chat=True, repeat=0)
    asked = [(p, s) for p, s in zip(lm.prompts, lm.schemas) if s is not None]
    assert [p for p, _ in asked] == [p for p in lm.prompts if "Estimate the probability" in p]
    schemas = [s for _, s in asked]
    assert schemas == [assessment_schema(n) for n in (2, 3, 4)]
    assert schemas[1]["properties"]["final_answer"]["enum"] == ["A", "B", "C"]
    reply = '{"error_probability": 0.25, "final_answer": "C"}'
    jsonschema.validate(json.loads(reply), schemas[1])
    assert parse_assessment(reply, 3) == (0.25, "C")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"error_probability": 0.25, "final_answer": "D"}, schemas[1])


def test_stage2_base_error_probability_is_the_digit_expectation():
    items = _items()
    stage1 = pd.DataFrame({"item_id": items.item_id, "strategy": "standard", "answer": ["B", "C", "A"]})

    def loglik(context, continuation):
        if continuation.strip().isdigit():  # all mass on " 9" -> error probability 1; on " 0" when IDS shown
            target = " 0" if "Difficulty signal" in context else " 9"
            return 0.0 if continuation == target else -50.0
        return 0.0 if continuation == " Fast" else -1.0

    lm = ScriptedLM(lambda p: "", loglik=loglik)
    ie = {"q1": 0.1, "q2": 0.5, "q3": 0.9}
    base = assess(lm, items, stage1, "baseline", ie, chat=False, repeat=0, base_slow_below=0.5, base_error_p="digits")
    ids = assess(lm, items, stage1, "ids", ie, chat=False, repeat=0, base_slow_below=0.5, base_error_p="digits")
    assert np.allclose(base["error_p"], 1.0) and np.allclose(ids["error_p"], 0.0, atol=1e-12)
    assert base["correct_final"].all()
    # the words' route (base_slow_below 0): " Fast" is the likelier route
    dpr = assess(lm, items, stage1, "dpr", ie, chat=False, repeat=0, base_slow_below=0, base_error_p="digits")
    assert (dpr["mode"] == "fast").all()  # " Fast" is the likelier route
    with pytest.raises(ValueError, match="base_error_p must be"):
        assess(lm, items, stage1, "baseline", ie, chat=False, repeat=0, base_slow_below=0.5, base_error_p="words")
    with pytest.raises(ValueError, match="needs lcae.base_slow_below and lcae.base_error_p"):
        assess(lm, items, stage1, "baseline", ie, chat=False, repeat=0)


def test_calibrated_error_probability_recovers_the_examinees_own_reliability():
    """answer_calibration recovers a planted logistic map from option probability to being right
    (parameter recovery, 3,000 calibration items), and "calibrated" states one minus that map
    of the Stage-2 answer's probability."""
    from scipy.special import expit, logit

    from selfknow.protocols.lcae.metacognition import answer_calibration

    rng = np.random.default_rng(3)
    n, slope, intercept = 3000, 0.6, -0.4
    margin = rng.uniform(0, 4, n)            # log-odds of option a against each of the others
    p_a = 1 / (1 + 3 * np.exp(-margin))
    right = rng.random(n) < expit(slope * logit(p_a) + intercept)
    cal = pd.DataFrame({"item_id": [f"c{i}" for i in range(n)], "question": [f"C{i}?" for i in range(n)],
                        "choices": [["a", "b", "c", "d"]] * n, "answer": np.where(right, "A", "B")})
    by_q = dict(zip(cal["question"], margin))

    def loglik(context, continuation):
        q = next(k for k in (*by_q, "Q one?") if k in context)
        return float(by_q.get(q, 1.0)) if continuation == " a" else 0.0

    lm = ScriptedLM(lambda p: "", loglik=loglik)
    got = answer_calibration(lm, cal)
    assert got == pytest.approx((slope, intercept), abs=0.12)
    items = _items().iloc[:1]
    stage1 = pd.DataFrame({"item_id": ["q1"], "strategy": "standard", "answer": ["A"]})
    out = assess(lm, items, stage1, "baseline", {"q1": 0.1}, chat=False, repeat=0, base_slow_below=0.5, base_error_p="calibrated",
                 calibration=got)
    p_q1 = 1 / (1 + 3 * np.exp(-1.0))
    assert out["error_p"].iloc[0] == pytest.approx(1 - expit(got[0] * logit(p_q1) + got[1]))
    with pytest.raises(ValueError, match="calibration map"):
        assess(lm, items, stage1, "baseline", {"q1": 0.1}, chat=False, repeat=0, base_slow_below=0.5, base_error_p="calibrated")
    k = int(right.sum())  # right on every item: the smoothed rate, no slope
    assert answer_calibration(lm, cal[right]) == pytest.approx((0.0, logit((k + 0.5) / (k + 1))))


def test_stage2_base_routes_slow_where_the_model_is_unsure_of_its_answer():
    items = _items()
    stage1 = pd.DataFrame({"item_id": items.item_id, "strategy": "standard", "answer": ["B", "C", "A"]})
    sure = {"Q one?": " b", "Q two?": " a"}  # q1: its answer B at 0.92; q2: C at 0.03; q3: uniform

    def loglik(context, continuation):
        if continuation.strip().isdigit():
            return 0.0 if continuation == " 5" else -50.0
        q = next((k for k in sure if k in context), None)
        return 0.0 if q and continuation == sure[q] else -3.5 if q else 0.0

    lm = ScriptedLM(lambda p: "recall", loglik=loglik)
    ie = {"q1": 0.1, "q2": 0.5, "q3": 0.9}
    dpr = assess(lm, items, stage1, "dpr", ie, chat=False, repeat=0, base_slow_below=0.5, base_error_p="answer")
    # q1: e^0 / (e^0 + 3 e^-3.5) = 0.92 -> Fast; q2: 0.03 -> Slow; q3: 0.25 -> Slow
    assert list(dpr["mode"]) == ["fast", "slow", "slow"]
    # the Slow items are re-answered after the reflection: q2 by its likeliest option, A
    assert list(dpr["final_answer"]) == ["B", "A", "A"]
    assert (assess(lm, items, stage1, "dpr", ie, chat=False, repeat=0, base_slow_below=0.2,
                   base_error_p="digits")["mode"]
            == ["fast", "slow", "fast"]).all()
    # the error probability it states: one minus its own probability of its final answer
    p_sure = 1 / (1 + 3 * np.exp(-3.5))
    assert np.allclose(dpr["error_p"], [1 - p_sure, 1 - p_sure, 0.75])
    base = assess(lm, items, stage1, "baseline", ie, chat=False, repeat=0, base_slow_below=0.5, base_error_p="answer")
    assert np.allclose(base["error_p"], [1 - p_sure, 1 - (1 - p_sure) / 3, 0.75])


def test_stage_budgets_come_from_the_model_entry_or_the_stage():
    items = _items()
    stage1 = pd.DataFrame({"item_id": items["item_id"], "answer": ["B", "C", "D"]})
    ie = dict(zip(items["item_id"], [0.2, 0.5, 0.8]))
    lm = ScriptedLM(lambda p: "slow. Probability wrong: 0.3")
    assess(lm, items, stage1, "dpr", ie, chat=True, repeat=0, max_new_tokens=100)
    assert lm.budgets == [8, 100, 64]  # route, reflection, the stage's own assessment budget
    lm.budgets.clear()
    lm.token_budgets = {"lcae_stage1": 900, "lcae_stage2": 700}
    assess(lm, items, stage1, "dpr", ie, chat=True, repeat=0, max_new_tokens=100)
    answer_items(lm, items, "cot", chat=True, max_new_tokens=256)
    assert lm.budgets == [8, 100, 700, 900]
    with pytest.raises(ValueError, match="unknown budget stage 'lcae_stage9'"):
        lm.budget("lcae_stage9", 1)


def test_table3_note_names_the_models_whose_repeats_were_shared():
    from selfknow.protocols.lcae.jobs import stage2_repeats_shared
    from selfknow.protocols.lcae.tables import repeats_note

    hf_chat, hf_base = {"name": "smol", "backend": "hf", "chat": True}, {"name": "wm", "backend": "hf"}
    api = {"name": "gpt", "backend": "openai"}
    # a base LM assesses by log-likelihoods: the same at any temperature
    assert [stage2_repeats_shared(s, 0.0) for s in (hf_chat, hf_base, api)] == [True, True, False]
    assert [stage2_repeats_shared(s, 0.7) for s in (hf_chat, hf_base, api)] == [False, True, False]
    note = repeats_note(["gpt", "smol", "wm"], ["smol", "wm"])
    assert "cells are single values without an interval, for: smol, wm (" in note
    assert note.endswith("Repeats were separate requests, each its own answer, for: gpt.")
    assert "separate" not in repeats_note(["wm"], ["wm"]) and "single" not in repeats_note(["gpt"], [])


def test_table3_prints_no_interval_where_the_repeats_agree():
    """Table III's cells: mean LCAE over repeats with its t-interval; identical repeats (one set
    of requests) have none, so the cell is the value alone, never "[0.731, 0.731]"."""
    from selfknow.protocols.lcae.tables import top_models_table

    rows = [{"examinee": ex, "condition": c, "repeat": r, "theta": th,
             "lcae": 0.731 if ex == "same" else 0.7 + 0.1 * r}
            for ex, th in (("same", 1.0), ("varied", 0.0)) for c in ("baseline", "ids") for r in range(3)]
    t = top_models_table(pd.DataFrame(rows)).set_index("examinee")
    assert t.loc["same", "Baseline"] == "0.731"
    # 0.7, 0.8, 0.9: mean 0.8, s = 0.1, t(0.975, 2) = 4.302653 -> half 0.2484
    assert t.loc["varied", "IDS"] == "0.800 [0.552, 1.048]"


def test_table1_squared_variant_is_the_mean_squared_error_over_repeats_with_the_same_tests():
    from selfknow.protocols.lcae.tables import per_condition_table
    from selfknow.stats.lcae import lcae

    # three examinees x 4 conditions x 2 repeats; each repeat's squared LCAE from (e, ĉ) pairs
    e = np.array([0.2, 0.6])
    rows = []
    for k, ex in enumerate(["m1", "m2", "m3"]):
        for j, cond in enumerate(["baseline", "ids", "dpr", "ids_dpr"]):
            for rep in range(2):
                c = np.clip(e + 0.1 * (k + j + rep), 0, 1)
                rows.append({"examinee": ex, "condition": cond, "repeat": rep, "theta": 0.0,
                             "lcae": float(lcae(e, c)), "lcae_squared": float(lcae(e, c, kind="squared"))})
    built = per_condition_table(pd.DataFrame(rows), "lcae_squared")
    table, notes = built.table, built.notes
    # m1 at baseline: repeats shift ĉ by 0 and 0.1, so (0 + 0.01) / 2; m2 at IDS+DPR by 0.4 and 0.5,
    # clipped at 1 for e = 0.6 in the second: ((0.16 + 0.16) / 2 + (0.25 + 0.16) / 2) / 2
    assert table.loc[0, "Baseline"] == pytest.approx(0.005)
    assert table.loc[1, "IDS+DPR"] == pytest.approx((0.16 + 0.205) / 2)
    assert table.loc[3, "examinee"] == "mean" and table.loc[3, "DPR"] == pytest.approx(table.loc[:2, "DPR"].mean())
    assert notes[0].startswith("Friedman χ²(3) = ") and notes[1].startswith("Pairwise Wilcoxon signed-rank, Holm-adjusted p")
    assert not np.allclose(table.loc[:2, "Baseline"], per_condition_table(pd.DataFrame(rows), "lcae").table.loc[:2, "Baseline"])


def test_stage3_ability_equals_stage1_for_identical_answers(tmp_path):
    """Stage 3 re-estimates θ with Stage-1 difficulties fixed over the same (calibrated) items,
    so an examinee whose final answers are its Stage-1 answers keeps its Stage-1 ability,
    exactly, even with an extreme item in the set (it was -0.928 vs -0.927 with the extreme
    item in Stage 3 only)."""
    from selfknow.protocols.lcae.jobs import irt_job, stage3_job
    from selfknow.records import read_parquet, write_parquet

    rng = np.random.default_rng(7)
    n_items, theta = 30, rng.normal(0, 1, 8)
    b = np.linspace(-2, 2, n_items)
    X = (rng.random((8, n_items)) < 1 / (1 + np.exp(b[None, :] - theta[:, None]))).astype(int)
    X[:, 0] = 1  # an item every examinee answers right: extreme, left out of the calibration
    X[0, 1:3] = [0, 1]
    items = [f"q{k:02d}" for k in range(n_items)]
    paths = []
    for m in range(4):
        rows = [dict(item_id=q, strategy=s, correct=bool(X[2 * m + j, k]), status="parsed", model=f"m{m}",
                     checkpoint="final") for j, s in enumerate(("standard", "cot")) for k, q in enumerate(items)]
        paths.append(str(tmp_path / f"s1_{m}.parquet"))
        write_parquet(pd.DataFrame(rows), paths[-1])
    irt_job(paths, str(tmp_path / "persons.parquet"), str(tmp_path / "items.parquet"), method="jml")
    item_params = read_parquet(tmp_path / "items.parquet")
    assert (item_params["extreme"] != "").sum() >= 1
    s2 = pd.DataFrame([dict(item_id=q, condition="baseline", repeat=0, correct_final=bool(X[2, k]), error_p=0.3,
                            parsed=True, finish_reason="stop", mode="fast", tokens_in=1, tokens_out=1,
                            model="m1", checkpoint="final") for k, q in enumerate(items)])
    write_parquet(s2, tmp_path / "s2.parquet")
    stage3_job([str(tmp_path / "s2.parquet")], str(tmp_path / "persons.parquet"), str(tmp_path / "items.parquet"),
               str(tmp_path / "s3.parquet"), eps=1e-6)
    s3 = read_parquet(tmp_path / "s3.parquet")
    assert s3.loc[0, "theta"] == pytest.approx(s3.loc[0, "theta_stage1"], abs=1e-9)
    assert s3.loc[0, "n_ability_items"] == n_items - int((item_params["extreme"] != "").sum())
    assert s3.loc[0, "n_items"] == n_items  # LCAE still over every item


def test_tied_conditions_say_the_friedman_test_is_undefined_not_nan():
    from selfknow.protocols.lcae.tables import per_condition_table

    rows = [{"examinee": ex, "condition": c, "repeat": 0, "theta": th}
            for ex, th in (("m1", 0.2), ("m2", -0.4), ("m3", 1.0)) for c in ("baseline", "ids", "dpr", "ids_dpr")]
    (note,) = per_condition_table(pd.DataFrame(rows), "theta").notes
    assert "nan" not in note and note.startswith("Friedman test undefined: every examinee's value is the same")
    # nothing to test pairwise either: no Holm p = 1 that would read as a measured null
    assert "Holm-adjusted" not in note and "No pairwise Wilcoxon tests" in note


def test_reference_points_are_the_constant_the_floor_and_the_gain_with_its_item_se():
    from selfknow.protocols.lcae.evaluate import reference_points

    e, c = np.array([0.2, 0.6]), np.array([0.3, 0.5])
    r = reference_points(e, c, eps=1e-6)
    assert r["lcae_const"] == pytest.approx(np.log(2), abs=1e-12)
    h = [-(p * np.log(p) + (1 - p) * np.log(1 - p)) for p in e]  # binary entropy of each reference
    assert r["lcae_floor"] == pytest.approx(np.mean(h), rel=1e-9)
    g1 = np.log(2) + 0.2 * np.log(0.3) + 0.8 * np.log(0.7)  # the second item states 0.5: gain 0
    assert r["lcae_gain"] == pytest.approx(g1 / 2, rel=1e-9)
    assert r["lcae_gain_se"] == pytest.approx(abs(g1) / 2, rel=1e-9)  # sd of (g1, 0) / sqrt(2)
    assert r["lcae_squared_const"] == pytest.approx((0.3 ** 2 + 0.1 ** 2) / 2)
    assert r["lcae_squared_floor"] == 0
    assert r["lcae_squared_gain"] == pytest.approx((0.09 - 0.01 + 0.01 - 0.01) / 2)


def test_table1_prints_reference_points_and_which_examinees_beat_the_constant():
    from selfknow.protocols.lcae.tables import per_condition_table, routes_note

    rows = []
    for ex, gain, se in (("good", 0.10, 0.02), ("noisy", 0.10, 0.08), ("bad", -0.2, 0.01)):
        for k, cond in enumerate(("baseline", "ids", "dpr", "ids_dpr")):
            for rep in range(2):
                rows.append({"examinee": ex, "condition": cond, "repeat": rep, "theta": 0.1 * k,
                             "lcae": np.log(2) - gain - 0.01 * k, "lcae_const": np.log(2), "lcae_floor": 0.5,
                             "lcae_gain": gain + 0.01 * k, "lcae_gain_se": se, "n_items": 10,
                             "n_slow": 3 if cond == "dpr" and ex == "good" else 0})
    built = per_condition_table(pd.DataFrame(rows), "lcae")
    table, notes = built.table, built.notes
    assert list(table.columns) == ["examinee", "Baseline", "IDS", "DPR", "IDS+DPR", "constant 0.5",
                                   "floor (ĉ = e)", "beats 0.5 in"]
    assert table.loc[table.examinee == "bad", "constant 0.5"].item() == pytest.approx(np.log(2))
    # 0.10 ± 1.96 x 0.02 lies above 0; 0.10-0.13 ± 1.96 x 0.08 reaches below it
    assert dict(zip(table["examinee"][:3], table["beats 0.5 in"][:3])) == {
        "good": "Baseline, IDS, DPR, IDS+DPR", "noisy": "none", "bad": "none"}
    assert "Baseline 1 of 3" in notes[0] and "ln 2 = 0.693" in notes[0]
    note = routes_note(pd.DataFrame(rows))
    assert note.startswith("DPR routes: DPR: Slow on 6 and Fast on 54 of 60 assessments (items x repeats x 3 examinees)")
    assert "differs from Baseline in 3 of 3 examinees" in note


def test_the_lcae_check_needs_an_examinee_above_the_constant_and_routes_that_change_something():
    from selfknow.protocols.lcae.check import lcae_check

    def stage3(gain, slow):
        return pd.DataFrame([{"examinee": ex, "condition": cond, "repeat": 0, "theta": 0.0,
                              "lcae": np.log(2) - gain - (0.01 if cond in ("dpr", "ids_dpr") and slow else 0),
                              "lcae_gain": gain, "lcae_gain_se": 0.02, "n_items": 10,
                              "n_slow": slow if cond in ("dpr", "ids_dpr") else 0}
                             for ex in ("a", "b") for cond in ("baseline", "ids", "dpr", "ids_dpr")])

    lines, ok = lcae_check(stage3(0.1, 2))
    assert ok and lines[0].startswith("LCAE: 2 of 2 examinees beat the constant")
    assert "LCAE DPR: Slow on 4 of 20 assessments; differs from Baseline in 2 of 2 examinees" in lines
    assert not lcae_check(stage3(0.01, 2))[1]  # 0.01 ± 1.96 x 0.02 reaches below 0
    lines, ok = lcae_check(stage3(0.1, 0))
    assert not ok and "differs from IDS in 0 of 2 examinees" in lines[-2] and lines[-1] == "LCAE check fails"


def test_item_fit_note_counts_every_item_and_table3_uses_the_papers_column_order():
    from selfknow.protocols.lcae.tables import item_fit, method_note, top_models_table

    items = pd.DataFrame({"item_id": list("abcde"), "b": 0.0, "se": 0.1, "infit": [1.0, 1.0, 1.7, 2.5, np.nan],
                          "outfit": [1.0, 1.0, 1.0, 1.0, np.nan], "band": "", "extreme": ["", "", "", "", "all_correct"]})
    (note,) = item_fit(items).notes
    assert "acceptable: 2, marginal: 1, severe: 1, extreme" in note and "): 1; 5 items in all." in note
    s3 = pd.DataFrame([{"examinee": "m", "condition": c, "repeat": r, "theta": 0.0, "lcae": 1.0 + r}
                       for c in ("baseline", "ids", "dpr", "ids_dpr") for r in range(3)])
    assert list(top_models_table(s3).columns) == ["examinee", "ability", "Baseline", "DPR", "IDS", "DPR+IDS"]
    # the BCE cost of one item at reference 0.5 stated as 0: -0.5 log(eps) - 0.5 log(1 - eps)
    note = method_note(method="jml", eps=1e-6, base_models=[])
    assert "costs 6.9 (at ε = 1e-15: 17.3; at 1e-3: 3.5)" in note and "(L-1)/L" in note
    # the note names the reading the run used, or lists every reading when it is not known
    note = method_note(method="jml", eps=1e-6, base_models=["wm"], base_error_p="calibrated")
    assert "lcae.base_error_p (= calibrated: one minus" in note and "digits" not in note
    assert all(k in method_note(method="jml", eps=1e-6, base_models=["wm"]) for k in ("digits:", "answer:", "calibrated:"))


def test_table_notes_count_unparsed_and_truncated_replies_and_state_the_choices(tmp_path):
    """write_tables end to end on synthetic stage outputs: every table note says how many
    Stage-1 answers and Stage-2 self-assessments gave no answer, and the open choices."""
    from selfknow.protocols.lcae.jobs import irt_job, stage3_job
    from selfknow.protocols.lcae.tables import write_tables
    from selfknow.records import write_parquet

    rng = np.random.default_rng(3)
    items = [f"q{k:02d}" for k in range(20)]
    paths, s2paths = [], []
    for m in range(3):
        status = ["parsed"] * 18 + ["unparsed", "truncated"]
        rows = [dict(item_id=q, strategy=s, correct=bool(rng.random() < 0.5) and st == "parsed", status=st,
                     model=f"m{m}", checkpoint="final")
                for s in ("standard", "cot") for q, st in zip(items, status)]
        paths.append(str(tmp_path / f"s1_{m}.parquet"))
        write_parquet(pd.DataFrame(rows), paths[-1])
        s2 = pd.DataFrame([dict(item_id=q, condition=c, repeat=r, correct_final=bool(rng.random() < 0.5),
                                error_p=np.nan if k == 0 else rng.random(), parsed=k != 0,
                                finish_reason="length" if (k == 0 and c == "dpr") else "stop", mode="fast",
                                tokens_in=1, tokens_out=1, model=f"m{m}", checkpoint="final")
                           for c in ("baseline", "ids", "dpr", "ids_dpr") for r in range(2)
                           for k, q in enumerate(items)])
        s2paths.append(str(tmp_path / f"s2_{m}.parquet"))
        write_parquet(s2, s2paths[-1])
    irt_job(paths, str(tmp_path / "persons.parquet"), str(tmp_path / "items.parquet"), method="jml")
    stage3_job(s2paths, str(tmp_path / "persons.parquet"), str(tmp_path / "items.parquet"),
               str(tmp_path / "s3.parquet"), eps=1e-6)
    names = ["table1", "table1_squared", "table2", "table3", "item_fit", "findings"]
    outputs = {f"{n}_{x}": str(tmp_path / f"{n}.{x}") for n in names for x in ("csv", "md")}
    outputs["figure2"] = str(tmp_path / "figure2.png")
    stages = [str(tmp_path / f"{p}.parquet") for p in ("s3", "persons", "items")]
    built = write_tables(*stages, outputs, {"m0": [1.0, 2.0]}, [], method="jml", eps=1e-6, base_models=["m2"])
    for n in ("table1", "table2", "table3"):
        md = (tmp_path / f"{n}.md").read_text()
        assert ("Stage 1: of 120 answers (6 examinees), 6 gave no explicit final answer (unparsed) and 6 were "
                "cut at the token budget (truncated)") in md
        # the replies and the fit are two paragraphs of the note
        assert "Stage 2: of 480 self-assessments, 18 unparsed and 6 truncated, left out of their examinee's mean " \
               "LCAE.\n\nRasch: joint maximum likelihood" in md
        assert "(L-1)/L" in md and "ε = 1e-06 (lcae.lcae_eps)" in md and "Base LMs (m2)" in md
    # Figure 2 through the same driver: one point, m0's only examinee of Standard prompting with a price
    assert list(built) == [*names, "figure2"] and (tmp_path / "figure2.png").stat().st_size > 0
    assert built["figure2"].table[["group", "label"]].values.tolist() == [["m0", "final"]]
    # records without prices (lcae-eval without --prices): the tables, no figure and no figure output needed
    (tmp_path / "none").mkdir()
    bare = {k: str(tmp_path / "none" / Path(v).name) for k, v in outputs.items() if k != "figure2"}
    assert list(write_tables(*stages, bare, {}, None, method="jml", eps=1e-6, base_models=[])) == names


def test_findings_rows_are_paired_over_examinees_with_a_t_interval_and_a_verdict():
    from scipy import stats

    from selfknow.protocols.lcae.tables import findings

    # IDS lowers every examinee's LCAE by 0.2-0.3, DPR changes it by ±0.05; repeats identical
    rows = []
    for k, ex in enumerate(["a", "b", "c"]):
        base = 1.0 + 0.2 * k
        for cond, lc in (("baseline", base), ("ids", base - 0.2 - 0.05 * k), ("dpr", base + (0.05, -0.05, 0.0)[k])):
            for rep in range(2):
                rows.append({"examinee": ex, "condition": cond, "repeat": rep, "lcae": lc,
                             "lcae_gain": np.log(2) - lc})
    built = findings(pd.DataFrame(rows))
    table, notes = built.table, built.notes
    assert list(table["comparison"]) == ["Baseline vs constant 0.5 (ln 2 − LCAE)", "IDS vs constant 0.5 (ln 2 − LCAE)",
                                         "DPR vs constant 0.5 (ln 2 − LCAE)", "IDS − Baseline (LCAE)",
                                         "DPR − Baseline (LCAE)"]
    ids = table.iloc[3]
    # differences -0.2, -0.25, -0.3: mean -0.25, sd 0.05, t(2) half-width
    half = stats.t.ppf(0.975, 2) * 0.05 / np.sqrt(3)
    assert ids["difference"] == pytest.approx(-0.25)
    assert ids["95 % interval"] == f"[{-0.25 - half:+.3f}, {-0.25 + half:+.3f}]"
    assert ids["verdict"] == "agrees" and ids["paper's direction"] == "< 0"
    assert table.iloc[4]["verdict"] == "undecided (interval includes 0)"
    # every examinee's LCAE is above ln 2: worse than the constant, a claim the paper does not make
    assert table.iloc[0]["difference"] == pytest.approx(np.log(2) - 1.2)
    assert table.iloc[0]["verdict"] == "no direction stated"
    assert "Of 5 comparisons: 1 agrees, 2 undecided (interval includes 0), 2 no direction stated" in notes[0]
    assert "over the 3 Stage-2 examinees" in notes[1]
    assert notes[2] == ""  # IDS lowers every examinee's LCAE
    worse = pd.DataFrame(rows).assign(lcae=lambda d: d["lcae"] + np.where((d.examinee == "b") & (d.condition == "ids"),
                                                                          0.5, 0.0))
    assert findings(worse).notes[2] == ("Per examinee (means over repeats, no interval): IDS raises LCAE, the reverse "
                                     "of the paper, for 1 of 3 examinees: b (1.200 -> 1.450).")


def test_findings_verdicts_and_intervals_never_print_negative_zero():
    from selfknow.report.findings import Claim, interval_text, verdict

    assert verdict(0.1, 0.3, 1) == "agrees" and verdict(0.1, 0.3, -1) == "disagrees"
    assert verdict(-0.3, -0.1, 0) == "disagrees" and verdict(-0.1, 0.2, 1).startswith("undecided")
    assert verdict(np.nan, np.nan, 1) == "no interval" and verdict(0.1, 0.2, None) == "no direction stated"
    assert verdict(0.0, 0.0, 0) == "no difference on any unit" and interval_text(0.2, 0.2) == "none: every unit alike"
    # float rounding is no difference: LCAEs equal up to the last bits
    assert verdict(-2e-17, 3e-17, 0) == "no difference on any unit" and interval_text(-2e-17, 3e-17).startswith("none")
    assert interval_text(-0.0001, 0.2) == "[0.000, +0.200]" and verdict(-1e-6, 1e-6, 0).startswith("undecided")
    # a real interval narrower than three decimals shows more, never reading as a point
    assert interval_text(1e-4, 4e-4) == "[+0.0001, +0.0004]"
    assert interval_text(-0.0001, 0.0002) == "[-0.0001, +0.0002]" and interval_text(-0.2, 0.1) == "[-0.200, +0.100]"
    assert Claim(1, "x").direction == 1
