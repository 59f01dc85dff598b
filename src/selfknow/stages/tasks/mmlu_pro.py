"""MMLU-Pro (TIGER-Lab/MMLU-Pro; LADDER §3, §E.1 Table 14): up to 10 options A-J per question,
scored by the answer extraction of the authors' `evaluate_from_api.py` / `evaluate_from_local.py`.

Hub row schema: question_id, question, options (padded with "N/A", which the authors drop
before lettering), answer (letter), answer_index, cot_content, category, src.
"""
from __future__ import annotations

import re

import pandas as pd

from selfknow.stages.datasets.source import ItemError, at, frame, make_item, read_rows, require_fields

LETTERS = "ABCDEFGHIJ"

_ANSWER_IS = re.compile(r"answer is \(?([A-J])\)?")
_ANSWER_COLON = re.compile(r".*[aA]nswer:\s*([A-J])")
_LAST_LONE_LETTER = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)


def extract_answer(text: str) -> str | None:
    """The option letter of a response, or None: the first "answer is (X)"; else the letter
    after the last "Answer:" of the first line that has one; else the last stand-alone letter
    A-J in the text (the authors' three regexes, tried in their order)."""
    for pattern in (_ANSWER_IS, _ANSWER_COLON):
        m = pattern.search(text)
        if m:
            return m.group(1)
    m = _LAST_LONE_LETTER.search(text)
    return m.group(0) if m else None


def score(response: str, answer: str) -> tuple[str | None, bool]:
    """(extracted letter, correct). An unparsed response counts as wrong, as the authors'
    running tally in `evaluate()` counts it."""
    pred = extract_answer(response)
    return pred, pred == answer


def process(rows: list[dict], name: str, where: str, split: str) -> pd.DataFrame:
    """Items of the hub rows of one split (the authors use "test" for questions and
    "validation" for the CoT examples); the domain is the category, ids are the question_id."""
    require_fields(rows, {"question_id": int, "question": str, "options": list, "answer": str,
                          "answer_index": int, "category": str}, where)
    items = []
    for i, r in enumerate(rows):
        options = [o for o in r["options"] if o != "N/A"]
        if not 1 <= len(options) <= len(LETTERS):
            raise ItemError(f"{at(where, i)}: expected 1-10 options, got {len(options)}")
        index = int(r["answer_index"])
        if not 0 <= index < len(options) or LETTERS[index] != r["answer"]:
            raise ItemError(f"{at(where, i)}: answer {r['answer']!r} and answer_index {index} disagree "
                            f"or point past the {len(options)} options")
        items.append(make_item(r["question_id"], name, r["category"], r["question"], options, r["answer"],
                               [r["answer"]], split))
    return frame(items)


def load(name: str, spec: dict, split: str = "test") -> pd.DataFrame:
    rows, where = read_rows(name, spec, split)
    return process(rows, name, where, split)
