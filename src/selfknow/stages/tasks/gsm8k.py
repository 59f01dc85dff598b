"""GSM8K (openai/gsm8k, config `main`; LADDER §3, §F.1 Table 32): the final number.

Scored as lm-evaluation-harness's `gsm8k` task scores it with its "flexible-extract" filter:
the prediction is the last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)` in the response, the
reference is what follows "#### " in the hub's answer, and both lose commas, dollar signs and
a final period before an exact string comparison (so "18.00" does not match "18", as there).
The reference is cleaned too because lm-eval cleans it: its `exact_match` applies the task's
`regexes_to_ignore` (",", "\\$", "(?s).*#### ", "\\.$") to the reference, the whole hub answer,
as to the prediction (`lm_eval.api.metrics.exact_match_hf_evaluate`; tests/test_tasks_gsm8k.py
checks the two against each other).

Hub row schema: question, answer (a worked solution ending in "#### <number>").
"""
from __future__ import annotations

import re

import pandas as pd

from selfknow.stages.datasets.source import ItemError, at, frame, make_item, read_rows, require_fields

_NUMBER = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_REFERENCE = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def _clean(s: str) -> str:
    s = s.replace(",", "").replace("$", "").strip()
    return s[:-1] if s.endswith(".") else s


def reference_number(solution: str) -> str | None:
    """The number after "#### " in a hub solution, cleaned like a prediction; None without one."""
    m = _REFERENCE.search(solution)
    return _clean(m.group(1)) if m else None


def extract_answer(response: str) -> str | None:
    """The last number in the response (commas, "$" and a final period removed); None if none."""
    matches = _NUMBER.findall(response)
    if not matches:
        return None
    return _clean(next(g for g in matches[-1] if g))


def score(response: str, reference: str) -> tuple[str | None, bool]:
    """(extracted number, correct) against a reference number (`reference_number`)."""
    pred = extract_answer(response)
    return pred, pred is not None and pred == reference


def process(rows: list[dict], name: str, where: str, split: str) -> pd.DataFrame:
    """Items of one split: answer = the reference number, ids "<split>-<row>"."""
    require_fields(rows, {"question": str, "answer": str}, where)
    items = []
    for i, r in enumerate(rows):
        number = reference_number(r["answer"])
        if not number:
            raise ItemError(f"{at(where, i)}: the answer has no '#### <number>' line")
        items.append(make_item(f"{split}-{i}", name, "gsm8k", r["question"], None, number, [number], split))
    return frame(items)


def load(name: str, spec: dict, split: str = "test") -> pd.DataFrame:
    rows, where = read_rows(name, spec, split)
    return process(rows, name, where, split)
