"""The one scoring entry point, on items as the task loaders return them."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.tasks import bbh, bfcl, gsm8k, humaneval, mmlu_pro
from selfknow.stages.tasks.score import score_item

from conftest import REPO
from task_fixtures import code_run, sandbox_python


def test_each_task_scores_an_item_of_its_loader():
    mp = mmlu_pro.process([dict(question_id=1, question="q", options=list("abcd"), answer="C", answer_index=2,
                                category="law")], "mmlu_pro", "fixture", "test").iloc[0]
    assert score_item("mmlu_pro", mp, "The answer is (C).").correct
    assert score_item("mmlu_pro", mp, "The answer is (D).").parsed == "D"

    bb = bbh.process([{"input": "sort: b a", "target": "a b"}], "bbh", "word_sorting", "fixture").iloc[0]
    assert score_item("bbh", bb, "So the answer is a b.", bbh_lenient=False).correct
    assert not score_item("bbh", bb, "So the answer is a, b.", bbh_lenient=False).correct
    assert score_item("bbh", bb, "So the answer is a, b.", bbh_lenient=True).correct
    with pytest.raises(ValueError, match="pass bbh_lenient"):
        score_item("bbh", bb, "So the answer is a b.")

    gs = gsm8k.process([{"question": "q", "answer": "... #### 1,200"}], "gsm8k", "fixture", "test").iloc[0]
    s = score_item("gsm8k", gs, "That makes 1,200 dollars.")
    assert s.correct and s.parsed == "1200"

    doc = {"name": "f", "parameters": {"type": "dict", "required": ["x"], "properties": {"x": {"type": "integer"}}}}
    bf = bfcl.process([{"id": "simple_0", "question": [[{"role": "user", "content": "call f"}]], "function": [doc]}],
                      [{"id": "simple_0", "ground_truth": [{"f": {"x": [3]}}]}], "bfcl", "simple", "fixture").iloc[0]
    s = score_item("bfcl", bf, "[f(x=3)]")
    assert s.correct and json.loads(s.parsed) == [{"f": {"x": 3}}]
    s = score_item("bfcl", bf, "f(x=4)")
    assert not s.correct and "is not among [3]" in s.detail
    assert score_item("bfcl", bf, "I would call f.").parsed is None


def test_humaneval_runs_in_the_sandbox():
    python = sandbox_python()
    item = humaneval.load("humaneval", {"path": str(REPO / "tests" / "fixtures" / "tasks" / "humaneval.jsonl")}).iloc[1]
    assert score_item("humaneval", item, item.answer, code=code_run(python)).correct
    wrong = score_item("humaneval", item, "    return True\n", code=code_run(python))
    assert not wrong.correct and wrong.parsed == "failed" and "AssertionError" in wrong.detail
    with pytest.raises(ValueError, match="pass how it runs"):
        score_item("humaneval", item, item.answer)


def test_an_unknown_task_is_named():
    with pytest.raises(ValueError, match="unknown task 'mmlu'"):
        score_item("mmlu", {}, "")
