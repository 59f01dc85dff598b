"""BBH: lm-eval's exact match of the answer after "the answer is" by default, the lenient
normaliser (each task's answer form) as an option; suzgun/BIG-Bench-Hard targets as in
lukaemon/bbh, on hand-made responses."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets.source import ItemError
from selfknow.stages.tasks import bbh


def test_the_official_answer_is_the_first_the_answer_is_line_but_its_last_character():
    # lm-eval: re.findall(r"(?<=the answer is )(.*)(?=.)", response)[0].strip()
    assert bbh.extract_answer("Step 1 ... So the answer is (B).", False) == "(B)"
    assert bbh.extract_answer("So the answer is (B)", False) == "(B"
    assert bbh.extract_answer("the answer is (A).\nSo the answer is (C).", False) == "(A)"
    assert bbh.extract_answer("The answer is (A).", False) is None
    assert bbh.extract_answer("I do not know.", False) is None


def test_the_lenient_answer_is_after_the_last_answer_is():
    assert bbh.extract_answer("Step 1 ... So the answer is (B).", True) == "(B)"
    assert bbh.extract_answer("First the answer is (A). Wait, no. So the answer is (C).", True) == "(C)"
    assert bbh.extract_answer("So the answer is:\nvalid.", True) == "valid"
    assert bbh.extract_answer("I do not know.", True) is None


# (task, response, target, lm-eval's exact match, the lenient normaliser): the official result
# worked out by hand from lm-eval's filter and metric (module docstring)
CASES = [
    ("date_understanding", "... that is 12/14/1937. So the answer is (D).", "(D)", True, True),
    ("date_understanding", "So the answer is D.", "(D)", False, True),
    ("date_understanding", "So the answer is (D) 12/14/1937.", "(D)", False, True),
    ("date_understanding", "So the answer is 12/14/1937.", "(D)", False, False),
    ("date_understanding", "So the answer is (E).", "(D)", False, False),
    ("date_understanding", "So the answer is (D)", "(D)", False, True),          # "(D" without a final char
    ("date_understanding", "The answer is (D).", "(D)", False, True),            # case-sensitive "the"
    ("date_understanding", "First the answer is (A). Wait, no. So the answer is (C).", "(C)", False, True),
    ("date_understanding", "First the answer is (A).\nWait, no. So the answer is (C).", "(C)", False, True),
    ("sports_understanding", "So the answer is yes.", "yes", True, True),
    ("sports_understanding", "So the answer is Yes.", "yes", False, True),
    ("boolean_expressions", "So the answer is True.", "True", True, True),
    ("boolean_expressions", "So the answer is False.", "True", False, False),
    ("formal_fallacies", "So the answer is invalid.", "invalid", True, True),
    ("formal_fallacies", "So the answer is valid.", "invalid", False, False),
    ("causal_judgement", "Therefore the answer is: No.", "No", False, True),    # no space after "is"
    ("web_of_lies", "So the answer is No.", "No", True, True),
    ("object_counting", "So the answer is 12.", "12", True, True),
    ("object_counting", "So the answer is 12", "12", False, True),
    ("object_counting", "so the answer is 12.\n\nQ: next", "12", True, True),
    ("multistep_arithmetic_two", "So the answer is -1620.", "-1620", True, True),
    ("multistep_arithmetic_two", "So the answer is -1,620.", "-1620", False, True),
    ("multistep_arithmetic_two", "So the answer is 1620.", "-1620", False, False),
    ("word_sorting", "So the answer is costume counterpart oven.", "costume counterpart oven", True, True),
    ("word_sorting", "So the answer is costume, counterpart,  oven.", "costume counterpart oven", False, True),
    ("word_sorting", "So the answer is counterpart costume oven.", "costume counterpart oven", False, False),
    ("dyck_languages", "So the answer is ] ) }.", "] ) }", True, True),
    ("dyck_languages", "So the answer is ])}.", "] ) }", False, True),
    ("dyck_languages", "So the answer is ] }.", "] ) }", False, False),
    ("navigate", "Always face forward.", "Yes", False, False),
]


@pytest.mark.parametrize("task, response, target, official, lenient", CASES)
def test_scoring_agrees_with_lm_eval_by_default_and_the_lenient_option_is_lenient(task, response, target, official,
                                                                                  lenient):
    assert bbh.score(task, response, target, False)[1] is official
    assert bbh.score(task, response, target, True)[1] is lenient


def test_every_task_has_a_form_and_an_unknown_task_is_named():
    assert len(bbh.TASK_FORMS) == 27
    with pytest.raises(ValueError, match="BBH: unknown task 'word_sort'"):
        bbh.score("word_sort", "So the answer is a b.", "a b", False)


def test_rows_of_one_task_become_items(tmp_path):
    path = tmp_path / "snarks.jsonl"
    path.write_text("".join(json.dumps({"input": f"Which is sarcastic? {i}", "target": t}) + "\n"
                            for i, t in enumerate(["(A)", "(B)"])))
    items = bbh.load("bbh_snarks", {"path": str(path), "config_name": "snarks"})
    assert list(items.item_id) == ["snarks-0", "snarks-1"] and list(items.answer) == ["(A)", "(B)"]
    assert set(items.domain) == {"snarks"}
    with pytest.raises(ItemError, match=r"fixture: row 1: target 'A' of the multiple-choice task snarks"):
        bbh.process([{"input": "q", "target": "A"}], "bbh", "snarks", "fixture")
