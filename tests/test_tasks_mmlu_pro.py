"""MMLU-Pro: the authors' answer extraction (TIGER-Lab/MMLU-Pro evaluate_from_api.py) on
hand-made responses, and the hub row schema."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets.source import ItemError
from selfknow.stages.tasks import mmlu_pro


# (response, the letter the authors' extract_answer / extract_again / extract_final reads),
# worked out by hand from their three regexes
@pytest.mark.parametrize("response, letter", [
    ("Let's think step by step. ... The answer is (J).", "J"),
    ("the answer is C because", "C"),
    # the first "answer is" wins, even when a later one names another option
    ("The answer is (B). On reflection the answer is (D).", "B"),
    # lower-case letters are not options; the second rule takes the last "Answer: X"
    ("I think the answer is (b).\nAnswer: E", "E"),
    # (its ".*" does not cross lines: the first line with an "Answer:" decides)
    ("Answer: A\nsome more text\nanswer: G", "A"),
    ("Answer: B or Answer: F\nanswer: G", "F"),
    # last resort: the last stand-alone capital A-J anywhere in the text
    ("Options B and H look close; H fits the data.", "H"),
    ("It must be I.", "I"),
    ("No option fits here.", None),
    # K is not one of the ten letters
    ("The answer is (K).", None),
    ("The answer is J", "J"),
    # "answer is:" is not "answer is (", nor "answer:"; the last stand-alone letter decides
    ("The answer is: (B)", "B"),
    ("answer is (A) or (C)", "A"),
    ("The correct answer is E.", "E"),
    ("ANSWER IS (C)", "C"),
    # "\\s*" after "Answer:" crosses lines
    ("Answer:\n\nD", "D"),
    ("I choose option A. Final answer: I", "I"),
    ("The answer is (a).", None),
    ("The answer is 42", None),
    ("A) 5, B) 6. The answer is between them.", "B"),
])
def test_extract_answer_reads_the_letter_the_authors_three_regexes_read(response, letter):
    assert mmlu_pro.extract_answer(response) == letter


def test_score_counts_an_unparsed_response_as_wrong():
    assert mmlu_pro.score("The answer is (C).", "C") == ("C", True)
    assert mmlu_pro.score("The answer is (C).", "D") == ("C", False)
    assert mmlu_pro.score("no idea", "D") == (None, False)


def _row(**kw):
    row = dict(question_id=70, question="Q?", options=["a", "b", "c", "N/A", "N/A"], answer="B", answer_index=1,
               cot_content="", category="law", src="ori_mmlu-law")
    row.update(kw)
    return row


def test_rows_become_items_without_na_padding(tmp_path):
    path = tmp_path / "test.jsonl"
    rows = [_row(), _row(question_id=71, options=[f"o{k}" for k in range(10)], answer="J", answer_index=9,
                         category="physics")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = mmlu_pro.load("mmlu_pro", {"path": str(path)}, "test")
    assert list(items.item_id) == ["70", "71"] and list(items.domain) == ["law", "physics"]
    assert items.choices[0] == ["a", "b", "c"] and len(items.choices[1]) == 10
    assert list(items.answer) == ["B", "J"] and set(items.split) == {"test"}


def test_an_answer_that_disagrees_with_its_index_names_the_row():
    with pytest.raises(ItemError, match=r"fixture: row 2: answer 'C' and answer_index 1 disagree"):
        mmlu_pro.process([_row(), _row(answer="C")], "mmlu_pro", "fixture", "test")
    with pytest.raises(ItemError, match=r"fixture: row 1: missing field\(s\) \['category'\]"):
        mmlu_pro.process([{k: v for k, v in _row().items() if k != "category"}], "mmlu_pro", "fixture", "test")
