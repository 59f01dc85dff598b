"""MMLU (cais/mmlu, config `all`) for LADDER: the authors' released pool is the items at
positions 40-64 of each subject's rows of the test split (repository yin1245/selfbound),
20 subjects x 25 questions (LADDER §3, §B.1). `subject_range: [40, 65]` selects them; every
item is a test item (LADDER has no training split).
"""
from __future__ import annotations

import pandas as pd

from .source import ItemError, at, frame, make_item, read_rows, require_fields

LETTERS = "ABCD"


def process(rows: list[dict], name: str, spec: dict, where: str) -> pd.DataFrame:
    """Items of the hub's test rows: the configured subjects, positions `subject_range` of each
    subject's rows in file order; ids are "<subject>-<position>"."""
    require_fields(rows, {"question": str, "subject": str, "choices": list, "answer": int}, where)
    subjects = spec["subjects"]
    start, stop = spec["subject_range"]
    position: dict[str, int] = {}
    items = []
    for i, r in enumerate(rows):
        subject = r["subject"]
        k = position[subject] = position.get(subject, -1) + 1
        if subject not in subjects or not start <= k < stop:
            continue
        choices = list(r["choices"])
        if len(choices) != 4:
            raise ItemError(f"{at(where, i)}: expected 4 choices, got {len(choices)}")
        answer = int(r["answer"])
        if not 0 <= answer < 4:
            raise ItemError(f"{at(where, i)}: answer index {answer} is not 0-3")
        letter = LETTERS[answer]
        items.append(make_item(f"{subject}-{k}", name, subject, r["question"], choices, letter, [letter], "test"))
    short = sorted(s for s in subjects if position.get(s, -1) + 1 < stop)
    if short:
        raise ItemError(f"{where}: subject(s) {short} have fewer than {stop} rows (subject_range {[start, stop]})")
    return frame(items)


def load(name: str, spec: dict) -> pd.DataFrame:
    rows, where = read_rows(name, spec, "test")
    return process(rows, name, spec, where)
