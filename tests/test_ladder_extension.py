"""LADDER's extension tasks (Table 32): the offline analogues are scored by the real
benchmarks' scorers, the two-step protocol records what the model said, and the table's
scores, gaps and sign flips match hand-computed cases."""
import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from selfknow.config import ConfigError, validate_config
from selfknow.protocols.ladder.extension import (CONFIDENCE_SCHEMA, ask_task, confidence_prompt, parse_confidence,
                                                 table32, table32_note)
from selfknow.stages.items import build_items
from selfknow.stages.tasks.humaneval import CodeRun
from selfknow.stages.tasks.sandbox import Limits
from selfknow.stages.tasks.score import score_item

from conftest import REPO
from fakes import ScriptedLM

LIMITS = Limits(wall_s=5.0, cpu_s=2, memory_mb=512, max_processes=4, max_file_mb=4, output_bytes=4000,
                max_inodes=256, max_fds=64)
PYTHON = "python3"
CODE = CodeRun(python=PYTHON, limits=LIMITS, unfence=False, allow_unisolated=False)


def _items(loader: str, n: int = 6, seed: int = 7) -> pd.DataFrame:
    return build_items(loader, {"loader": loader, "n_items": n}, seed)["test"]


def _call(ground_truth: str, change: bool = False) -> str:
    """BFCL's prompt format making the first possible value of each parameter (the first
    parameter's value altered when `change`)."""
    (name, params), = json.loads(ground_truth)[0].items()
    args = []
    for k, (param, values) in enumerate(params.items()):
        value = values[0]
        if change and k == 0:
            value = value + 1 if isinstance(value, int) else value + "x"
        if value != "":
            args.append(f"{param}={json.dumps(value)}")
    return f"[{name}({', '.join(args)})]"


# ----------------------------------------------------------------------------- analogues
def test_analogues_are_seeded_and_sized():
    for loader in ("synthetic_gsm8k", "synthetic_humaneval", "synthetic_bfcl"):
        a, b, c = _items(loader), _items(loader), _items(loader, seed=8)
        assert len(a) == 6 and a["split"].eq("test").all()
        pd.testing.assert_frame_equal(a, b)
        assert not a["question"].equals(c["question"])
        assert build_items(loader, {"loader": loader, "n_items": 6}, 7)["train"].empty


def test_arithmetic_analogue_scored_by_gsm8k():
    items = _items("synthetic_gsm8k", n=8)
    for item in items.to_dict("records"):
        number = int(item["answer"])
        assert number > 0
        assert score_item("gsm8k", item, f"We compute it. The answer is {number}.").correct
        assert not score_item("gsm8k", item, f"The answer is {number + 1}.").correct


def test_function_analogue_reference_passes_and_wrong_body_fails():
    items = _items("synthetic_humaneval", n=5)
    for item in items.to_dict("records"):
        assert score_item("humaneval", item, item["answer"], code=CODE).correct, item["item_id"]
        wrong = score_item("humaneval", item, "    return None\n", code=CODE)
        assert not wrong.correct and wrong.parsed != "passed"


def test_tool_call_analogue_scored_by_bfcl_ast():
    items = _items("synthetic_bfcl", n=6)
    assert set(items["domain"]) == {"simple"}
    for item in items.to_dict("records"):
        assert score_item("bfcl", item, _call(item["ground_truth"])).correct, item["question"]
        bad = score_item("bfcl", item, _call(item["ground_truth"], change=True))
        assert not bad.correct and bad.detail


# ----------------------------------------------------------------------------- two steps
@pytest.mark.parametrize("reply, expected", [('{"confidence": 0.85}', 0.85), ('Sure: {"confidence": 70}', 0.7),
                                             ("85", 0.85), ("85%", 0.85), ("Confidence: 0.3", 0.3), ("100", 1.0),
                                             ("0", 0.0), ("150", None), ('{"confidence": 150}', None),
                                             ("The answer is 12.", None), ("not sure", None), ("", None)])
def test_parse_confidence(reply, expected):
    assert parse_confidence(reply) == expected


def test_two_steps_record_answer_score_and_confidence():
    items = _items("synthetic_gsm8k", n=3)
    answers = {row.question: row.answer for row in items.itertuples()}

    def respond(prompt: str) -> str:
        if "How confident are you" in prompt:
            # the first item's answer gets a number, the others an unparsable reply
            return "90" if first_q in prompt else "I cannot say."
        q = next(q for q in answers if q in prompt)
        return f"So the result is {answers[q]}" if q == first_q else "So the result is 0"

    first_q = items["question"].iloc[0]
    lm = ScriptedLM(respond)
    rec = ask_task(lm, "gsm8k", items, chat=True, max_new_tokens=32, confidence_max_new_tokens=4,
                   code=CODE)
    assert list(rec["correct"]) == [True, False, False]
    assert rec["confidence"].iloc[0] == pytest.approx(0.9)
    assert rec["confidence"].iloc[1:].isna().all()  # recorded as missing, not filled
    # step 2 shows the item's prompt and the model's own step-1 answer
    step2 = [p for p in lm.prompts if "How confident are you" in p]
    assert len(step2) == 3 and first_q in step2[0] and f"So the result is {answers[first_q]}" in step2[0]
    assert step2[0] == confidence_prompt(lm.prompts[0], rec["response"].iloc[0])
    assert lm.budgets == [32, 4]
    assert lm.schemas == [None] * 3 + [CONFIDENCE_SCHEMA] * 3  # step 2 asks for the JSON probability


def test_hanging_completion_scores_as_wrong():
    items = _items("synthetic_humaneval", n=1)
    lm = ScriptedLM(lambda p: "50" if "How confident" in p else
                    f"```python\ndef {items['entry_point'].iloc[0]}(x):\n    while True:\n        pass\n```")
    limits = Limits(wall_s=2.0, cpu_s=1, memory_mb=256, max_processes=2, max_file_mb=1, output_bytes=1000,
                    max_inodes=256, max_fds=64)
    rec = ask_task(lm, "humaneval", items, chat=True, max_new_tokens=64, confidence_max_new_tokens=4,
                   code=CodeRun(python=PYTHON, limits=limits, unfence=True, allow_unisolated=False))
    assert not rec["correct"].iloc[0] and rec["parsed"].iloc[0] in ("cpu_limit", "killed", "timeout")
    assert rec["fenced"].iloc[0] and rec["confidence"].iloc[0] == pytest.approx(0.5)


def test_the_note_counts_fenced_completions_and_unparsed_answers():
    from selfknow.protocols.ladder.extension import parse_counts

    rec = pd.DataFrame({"task": ["humaneval"] * 3 + ["gsm8k"] * 2 + ["bfcl"] * 4,
                        "fenced": [True, False, True] + [False] * 6,
                        "parsed": ["failed", "passed", "failed", None, "12", "[]", None, None, "[]"]})
    assert parse_counts(rec, False) == ("HumanEval completions in a markdown fence: 2 of 3 (run as written, as "
                                        "official HumanEval scoring does, so each fails). Unparsed answers (scored "
                                        "wrong): GSM8K 1 of 2, BFCL 2 of 4.")
    assert "their fenced code was run (unfence_humaneval" in parse_counts(rec, True)


def test_a_gap_resting_on_unparsed_answers_is_flagged():
    from selfknow.protocols.ladder.extension import unparsed_gap_note

    # m's BFCL gap is over 3 answers with a confidence, 2 of them unparsed; its GSM8K gap over
    # parsed answers only (the unparsed one stated no confidence)
    rec = pd.DataFrame({"model": "m", "task": ["gsm8k"] * 2 + ["bfcl"] * 4,
                        "parsed": ["12", None, "[]", None, None, "[]"],
                        "confidence": [0.9, None, 0.8, 0.99, 0.99, None]})
    assert unparsed_gap_note(rec) == ("FLAGGED, gaps resting on unparsed answers (scored wrong, so they read as "
                                      "overconfidence rather than measure it): m BFCL: 2 of 3.")
    assert unparsed_gap_note(rec.assign(parsed="ok")) == ""


def test_extension_job_draws_asks_scores_and_writes(tmp_path, monkeypatch):
    from selfknow.protocols.ladder.extension import RECORD_COLUMNS, extension_job
    from selfknow.records import read_parquet, write_parquet

    paths, replies = {}, {}
    for task, loader in (("gsm8k", "synthetic_gsm8k"), ("humaneval", "synthetic_humaneval"), ("bfcl", "synthetic_bfcl")):
        items = _items(loader, n=4)
        paths[task] = str(tmp_path / f"{task}.parquet")
        write_parquet(items, paths[task])
        for r in items.to_dict("records"):  # the right answer to every item
            replies[r["question"]] = {"gsm8k": f"It is {r['answer']}", "humaneval": r["answer"],
                                      "bfcl": _call(r["ground_truth"]) if task == "bfcl" else ""}[task]

    def respond(prompt):
        if "How confident are you" in prompt:
            return "80"
        return next(a for q, a in replies.items() if q in prompt)

    monkeypatch.setattr("selfknow.models.load_lm", lambda spec, ckpt, cache_dir=None: ScriptedLM(respond))
    out = tmp_path / "records.parquet"
    summary = extension_job(paths, {"name": "m", "backend": "hf", "chat": True}, str(out), model="m",
                            datasets={"gsm8k": "g", "humaneval": "h", "bfcl": "b"},
                            n_items={"gsm8k": 2, "humaneval": None, "bfcl": 3},
                            max_new_tokens={"gsm8k": 16, "humaneval": 32, "bfcl": 16}, confidence_max_new_tokens=4,
                            sandbox={"python": PYTHON, "wall_s": 5.0, "cpu_s": 2, "memory_mb": 512,
                                     "max_processes": 4, "max_file_mb": 4, "output_bytes": 4000,
                                     "max_inodes": 256, "max_fds": 64,
                                     "allow_unisolated": False}, unfence_humaneval=False, seed=3)
    rec = read_parquet(out)
    assert list(rec.columns) == RECORD_COLUMNS
    assert rec.groupby("task").size().to_dict() == {"gsm8k": 2, "humaneval": 4, "bfcl": 3}
    assert rec["correct"].all() and (rec["model"] == "m").all()
    assert dict(zip(rec["task"], rec["dataset"])) == {"gsm8k": "g", "humaneval": "h", "bfcl": "b"}
    assert summary["model_calls"] == 2 * 9 and summary["humaneval_correct"] == 4
    t = table32(rec, 1.0).iloc[0]
    assert (t["gsm8k_score"], t["bfcl_gap"], t["sign_flip"]) == (100.0, pytest.approx(-20.0), "no")


# ----------------------------------------------------------------------------- the table
def _records(model, task, correct, confidence):
    return pd.DataFrame({"model": model, "task": task, "correct": correct,
                         "confidence": np.array(confidence, dtype=float)})


def _model(model, gsm, he, bfcl):
    return pd.concat([_records(model, "gsm8k", *gsm), _records(model, "humaneval", *he),
                      _records(model, "bfcl", *bfcl)], ignore_index=True)


def test_table32_hand_computed():
    nan = np.nan
    records = pd.concat([
        # gap over the recorded items: ((.9-1) + (.8-1) + (.7-0)) / 3 = +13.33 pp; +50; -30
        _model("a", ([True, True, False, False], [0.9, 0.8, 0.7, nan]), ([False, False], [0.5, 0.5]),
               ([True, True], [0.6, 0.8])),
        # no recorded confidence on GSM8K: its gap is unavailable, the row unscored
        _model("b", ([True, False], [nan, nan]), ([True], [0.2]), ([False], [0.9])),
        # +0.5 pp is within the 1 pp tolerance: neither sign, so no flip
        _model("c", ([True, False], [0.505, 0.5]), ([True], [0.8]), ([True], [0.7])),
    ], ignore_index=True)
    t = table32(records, sign_tolerance_pp=1.0).set_index("model")
    a = t.loc["a"]
    assert (a["gsm8k_n"], a["gsm8k_n_confidence"]) == (4, 3)
    assert a["gsm8k_score"] == pytest.approx(50.0)
    assert a["gsm8k_confidence"] == pytest.approx(80.0)
    assert a["gsm8k_gap"] == pytest.approx(40.0 / 3)
    assert a["humaneval_score"] == 0.0 and a["humaneval_gap"] == pytest.approx(50.0)
    assert a["bfcl_score"] == 100.0 and a["bfcl_gap"] == pytest.approx(-30.0)
    assert a["sign_flip"] == "yes"
    b = t.loc["b"]
    assert np.isnan(b["gsm8k_gap"]) and np.isnan(b["gsm8k_confidence"]) and b["gsm8k_n_confidence"] == 0
    assert b["gsm8k_score"] == 50.0 and b["sign_flip"] == ""
    c = t.loc["c"]
    assert c["gsm8k_gap"] == pytest.approx(0.25) and c["sign_flip"] == "no"
    assert table32(records, sign_tolerance_pp=0.0).set_index("model").loc["c", "sign_flip"] == "yes"
    note = table32_note(t.reset_index(), {"gsm8k": "g", "humaneval": "h", "bfcl": "b"},
                        {"gsm8k": "synthetic_gsm8k", "humaneval": "humaneval", "bfcl": "bfcl"}, 1.0, "COUNTS.")
    assert "1 of 2 rows with available gaps. COUNTS. Items:" in note
    assert "offline analogue of GSM8K" in note and "offline analogue of HumanEval" not in note


def test_write_table32_goes_through_the_driver_with_one_note_paragraph(tmp_path, monkeypatch):
    """Table 32's job writes its catalog entry through the one driver: the builder returns a
    `Built` whose one paragraph ends with the reply modes, and the job reports its summary."""
    from ladder_fixtures import built_only
    from selfknow.protocols.ladder.extension import write_table32
    from selfknow.records import write_parquet

    called = built_only(monkeypatch)
    records = _model("a", ([True, False], [0.9, 0.8]), ([False], [0.5]), ([True], [0.2]))
    records = records.assign(parsed=["1", None, "x", "y"], fenced=False)
    write_parquet(records, tmp_path / "a.parquet")
    outputs = {f"table32_{e}": str(tmp_path / f"t.{e}") for e in ("csv", "md")}
    names = {"gsm8k": "g", "humaneval": "h", "bfcl": "b"}
    summary = write_table32([str(tmp_path / "a.parquet")], outputs, datasets=names, loaders=dict(names),
                            sign_tolerance_pp=1.0, unfence_humaneval=False, modes_note="MODES.")
    assert called == ["selfknow.protocols.ladder.extension:table32_with_note"]
    assert summary == {"models": 1, "sign_flips": 1, "rows_scored": 1}  # gaps +35, +50, -80 pp
    md = (tmp_path / "t.md").read_text()
    assert md.startswith("### LADDER Table 32: recorded cross-task scores")
    note = md.split("\n\n")[-1]
    assert note.startswith("Single-shot two-step protocol") and note.endswith("MODES.\n")
    assert "FLAGGED, gaps resting on unparsed answers" in note and "a GSM8K: 1 of 2" in note


# ----------------------------------------------------------------------------- config
def test_extension_task_needs_its_benchmark_loader():
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    validate_config(copy.deepcopy(cfg), "cfg.yaml")
    cfg["ladder"]["extension"]["gsm8k"]["dataset"] = "functions_analogue"
    with pytest.raises(ConfigError, match=r"ladder\.extension\.gsm8k\.dataset.*synthetic_humaneval"):
        validate_config(cfg, "cfg.yaml")
