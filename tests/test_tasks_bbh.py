"""BBH: exact match of the answer after "So the answer is", with each task's answer form
(suzgun/BIG-Bench-Hard targets as in lukaemon/bbh), on hand-made responses."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets.source import ItemError
from selfknow.stages.tasks import bbh


def test_the_answer_is_read_after_the_last_answer_is():
    assert bbh.extract_answer("Step 1 ... So the answer is (B).") == "(B)"
    assert bbh.extract_answer("First the answer is (A). Wait, no. So the answer is (C).") == "(C)"
    assert bbh.extract_answer("So the answer is:\nvalid.") == "valid"
    assert bbh.extract_answer("I do not know.") is None


@pytest.mark.parametrize("task, response, target, correct", [
    ("date_understanding", "... that is 12/14/1937. So the answer is (D).", "(D)", True),
    ("date_understanding", "So the answer is D.", "(D)", True),
    ("date_understanding", "So the answer is (D) 12/14/1937.", "(D)", True),
    ("date_understanding", "So the answer is 12/14/1937.", "(D)", False),
    ("date_understanding", "So the answer is (E).", "(D)", False),
    ("sports_understanding", "So the answer is Yes.", "yes", True),
    ("boolean_expressions", "So the answer is False.", "True", False),
    ("formal_fallacies", "So the answer is invalid.", "invalid", True),
    ("formal_fallacies", "So the answer is valid.", "invalid", False),
    ("object_counting", "So the answer is 12.", "12", True),
    ("multistep_arithmetic_two", "So the answer is -1,620.", "-1620", True),
    ("multistep_arithmetic_two", "So the answer is 1620.", "-1620", False),
    ("word_sorting", "So the answer is costume counterpart oven.", "costume counterpart oven", True),
    ("word_sorting", "So the answer is costume, counterpart,  oven.", "costume counterpart oven", True),
    ("word_sorting", "So the answer is counterpart costume oven.", "costume counterpart oven", False),
    ("dyck_languages", "So the answer is ] ) }.", "] ) }", True),
    ("dyck_languages", "So the answer is ])}", "] ) }", True),
    ("dyck_languages", "So the answer is ] }", "] ) }", False),
    ("navigate", "Always face forward.", "Yes", False),
])
def test_scoring_per_task_form(task, response, target, correct):
    assert bbh.score(task, response, target)[1] is correct


def test_every_task_has_a_form_and_an_unknown_task_is_named():
    assert len(bbh.TASK_FORMS) == 27
    with pytest.raises(ValueError, match="BBH: unknown task 'word_sort'"):
        bbh.score("word_sort", "So the answer is a b.", "a b")


def test_rows_of_one_task_become_items(tmp_path):
    path = tmp_path / "snarks.jsonl"
    path.write_text("".join(json.dumps({"input": f"Which is sarcastic? {i}", "target": t}) + "\n"
                            for i, t in enumerate(["(A)", "(B)"])))
    items = bbh.load("bbh_snarks", {"path": str(path), "config_name": "snarks"})
    assert list(items.item_id) == ["snarks-0", "snarks-1"] and list(items.answer) == ["(A)", "(B)"]
    assert set(items.domain) == {"snarks"}
    with pytest.raises(ItemError, match=r"fixture: row 0: target 'A' of the multiple-choice task snarks"):
        bbh.process([{"input": "q", "target": "A"}], "bbh", "snarks", "fixture")
