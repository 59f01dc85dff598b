"""TriviaQA (mandarjoshi/trivia_qa, config `rc.nocontext`) as the persistent paper processes
it (§A.4; the authors' `conset/dataset_configs/triviaqa.py`).

Both hub splits are shuffled (`shuffle_seed`, 17) and deduplicated on the stripped question.
The in-context examples are the first `n_icl` (5) of the train split; the evaluation list is
the validation split followed by the train split minus its first `reserved_icl` (10), and
`train_range` / `test_range` index it (§A.4: 5000 and 4961). The authors' three blacklisted
questions are dropped (§A.4: 4999 / 4960 left).
"""
from __future__ import annotations

import logging

import pandas as pd

from .source import ItemError, at, dedup_stripped, frame, hf_shuffle_order, make_item, read_rows, require_fields, take_range

log = logging.getLogger(__name__)

#: questions the authors' manual audit found malformed (their BLACKLIST_QUESTIONS)
BLACKLIST = (
    "Which is the longest length below?",
    "The books were Alice and Jerry in the USA – what were they here?",
    "Three female trainers have won the Grand National, Jenny Pitman is one name either of the other two,",
)


def _shuffled_unique(rows: list[dict], seed: int, where: str) -> list[dict]:
    require_fields(rows, {"question_id": str, "question": str, "answer": object}, where)
    for i, r in enumerate(rows):
        if not isinstance(r["answer"], dict) or "value" not in r["answer"]:
            raise ItemError(f"{at(where, i)}: 'answer' must be an object with a 'value'")
    shuffled = [rows[i] for i in hf_shuffle_order(len(rows), seed)]
    return [shuffled[i] for i in dedup_stripped(r["question"] for r in shuffled)]


def _item(row: dict, name: str, split: str, item_id=None) -> dict:
    value = row["answer"]["value"].strip()
    aliases = list(dict.fromkeys([value, *(a.strip() for a in (row["answer"].get("aliases") or []))]))
    return make_item(item_id or row["question_id"], name, "trivia", row["question"].strip(), None, value, aliases, split)


def process(validation: list[dict], train: list[dict], name: str, spec: dict, where: tuple[str, str]) -> pd.DataFrame:
    """Items of the hub's validation and train rows, see the module docstring."""
    if spec["n_icl"] > spec["reserved_icl"]:
        raise ItemError(f"{name}: n_icl {spec['n_icl']} exceeds reserved_icl {spec['reserved_icl']}")
    val = _shuffled_unique(validation, spec["shuffle_seed"], where[0])
    tr = _shuffled_unique(train, spec["shuffle_seed"], where[1])
    icl = tr[: spec["n_icl"]]
    if spec["blacklist"] and any(r["question"].strip() in BLACKLIST for r in icl):
        raise ItemError(f"{where[1]}: a blacklisted question is among the in-context examples")
    evaluation = val + tr[spec["reserved_icl"]:]
    items = [_item(r, name, "icl", f"{name}-icl{k}") for k, r in enumerate(icl)]
    for split in ("train", "test"):
        part = take_range(evaluation, spec[f"{split}_range"], f"{name}: {split}_range")
        if spec["blacklist"]:
            n = len(part)
            part = [r for r in part if r["question"].strip() not in BLACKLIST]
            if n != len(part):
                log.info("%s: %s split: dropped %d blacklisted questions", name, split, n - len(part))
        items += [_item(r, name, split) for r in part]
    return frame(items)


def load(name: str, spec: dict) -> pd.DataFrame:
    (val, w_val), (tr, w_tr) = read_rows(name, spec, "validation"), read_rows(name, spec, "train")
    return process(val, tr, name, spec, (w_val, w_tr))
