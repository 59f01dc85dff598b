"""MedXpertQA (TsinghuaC3I/MedXpertQA, config `Text`, test split) for LCAE.

The hub's `question` already ends in "Answer Choices: (A) ... (B) ..."; the options are also
given as `options` (letter -> text). The prompt shows the choices from `options`, so the list
is cut from the question text: otherwise every prompt would show the options twice.
"""
from __future__ import annotations

import re

import pandas as pd

from .source import ItemError, at, frame, make_item, read_rows, require_fields

_ANSWER_CHOICES = re.compile(r"\s*Answer Choices:.*\Z", re.DOTALL)


def process(rows: list[dict], name: str, where: str) -> pd.DataFrame:
    """Items of the hub's test rows: the question without its "Answer Choices:" block, the
    options in letter order, the label a letter."""
    require_fields(rows, {"id": str, "question": str, "options": dict, "label": str, "medical_task": str}, where)
    items = []
    for i, r in enumerate(rows):
        opts = {k: v for k, v in dict(r["options"]).items() if v is not None}
        letters = sorted(opts)
        if r["label"] not in opts:
            raise ItemError(f"{at(where, i)} (id {r['id']!r}): label {r['label']!r} is not one of {letters}")
        question = _ANSWER_CHOICES.sub("", r["question"]).strip()
        if not question:
            raise ItemError(f"{at(where, i)} (id {r['id']!r}): empty question once the answer choices are cut")
        items.append(make_item(r["id"], name, r["medical_task"], question,
                               [opts[k] for k in letters], r["label"], [r["label"]], "test"))
    return frame(items)


def load(name: str, spec: dict) -> pd.DataFrame:
    rows, where = read_rows(name, spec, "test")
    return process(rows, name, where)
