"""BioASQ training data (a local JSON file, e.g. training14b.json from the BioASQ
participants' area) as the persistent paper processes it (§A.4, Table 6; the authors'
`conset/dataset_configs/bioasq.py`).

The questions are shuffled with Python's `random.Random(shuffle_seed).shuffle` (17) and
deduplicated on the stripped body; only factoid and list questions are kept, list questions
with more than `max_list_answers` (10) answer groups are dropped. A factoid question without
final punctuation or "?" gets a "?"; a list question gets a final "." if it has no final
punctuation, then " Just output one of the answers.". The first `n_icl` (5) questions of each
type are that type's in-context examples (domain "factoid" / "list"; a list example's answer
is its first reference), shown to the questions of that type only
(`selfknow.stages.items.icl_by_domain`); the rest is the test split (§A.4: 1690 factoid + 1029
list).
"""
from __future__ import annotations

import logging
import random
from pathlib import Path

import pandas as pd

from selfknow.records import read_json_file

from .source import frame, ItemError, make_item

log = logging.getLogger(__name__)

LIST_SUFFIX = " Just output one of the answers."


def _questions(path: Path, name: str) -> list:
    if not path.read_bytes().strip():
        raise ItemError(f"{name}: {path}: empty file, no questions")
    try:
        data = read_json_file(path)
    except ValueError as err:
        raise ItemError(f"{name}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ItemError(f"{name}: {path}: expected an object with a 'questions' list")
    if not data["questions"]:
        raise ItemError(f"{name}: {path}: no questions (the 'questions' list is empty)")
    return data["questions"]


def _check(q, where: str) -> None:
    if not isinstance(q, dict):
        raise ItemError(f"{where}: expected an object, got {type(q).__name__}")
    if q.get("type") not in ("factoid", "list"):
        return
    missing = [k for k in ("id", "body", "exact_answer") if k not in q]
    if missing:
        raise ItemError(f"{where}: missing key(s) {missing}")
    ea = q["exact_answer"]
    if not isinstance(ea, list) or not isinstance(q["body"], str):
        raise ItemError(f"{where}: 'exact_answer' must be a list and 'body' a string")
    if not ea:
        raise ItemError(f"{where}: empty exact_answer")
    if not q["body"].strip():
        raise ItemError(f"{where}: empty body")
    # list: [[syn, ...], [syn, ...]]; factoid: [syn, ...] in 14b (the authors assert it), one
    # nested group [[syn, ...]] in older releases, read as the same synonyms
    groups = [ea] if q["type"] == "factoid" and not isinstance(ea[0], list) else ea
    if q["type"] == "factoid" and len(groups) != 1 or not all(
            isinstance(g, list) and g and all(isinstance(a, str) for a in g) for g in groups):
        shape = "a list of strings" if q["type"] == "factoid" else "a list of non-empty lists of strings"
        raise ItemError(f"{where}: a {q['type']} question's exact_answer must be {shape}, got {ea!r}")


def process(questions: list, name: str, spec: dict, where: str) -> pd.DataFrame:
    """Items of the questions of one BioASQ training file, see the module docstring."""
    for i, q in enumerate(questions):
        _check(q, f"{where}: questions[{i}]" + (f" (id {q.get('id')!r})" if isinstance(q, dict) else ""))
    order = list(range(len(questions)))
    random.Random(spec["shuffle_seed"]).shuffle(order)
    seen: set[str] = set()
    icl = {"factoid": [], "list": []}
    items, n_other, n_long = [], 0, 0
    for i in order:
        q = questions[i]
        body = str(q.get("body", "")).strip()
        if body in seen:
            continue
        seen.add(body)  # the authors dedup every type before keeping factoid and list
        kind = q.get("type")
        if kind not in ("factoid", "list"):
            n_other += 1
            continue
        ea = q["exact_answer"]
        if kind == "factoid":
            ea = ea[0] if isinstance(ea[0], list) else ea
            if body[-1] not in ".?!" and "?" not in body:
                body += "?"
            first, aliases = ea[0].strip(), [a.strip() for a in ea]
        else:
            if len(ea) > spec["max_list_answers"]:
                n_long += 1
                continue
            if body[-1] not in ".?!":
                body += "."
            body += LIST_SUFFIX
            first, aliases = ea[0][0].strip(), [a.strip() for g in ea for a in g]
        if len(icl[kind]) < spec["n_icl"]:
            icl[kind].append(make_item(f"{name}-icl-{kind}{len(icl[kind])}", name, kind, body, None, first, [first], "icl"))
        else:
            items.append(make_item(q["id"], name, kind, body, None, first, list(dict.fromkeys(aliases)), "test"))
    if n_other:
        # persistent §A.4 keeps factoid and list questions only
        log.warning("%s: %s: skipped %d of %d questions that are not factoid/list", name, where, n_other,
                    len(questions))
    if n_long:
        log.info("%s: %s: dropped %d list questions with more than %d answer groups", name, where, n_long,
                 spec["max_list_answers"])
    return frame(icl["factoid"] + icl["list"] + items)


def load(name: str, spec: dict) -> pd.DataFrame:
    path = Path(spec["path"])
    if not path.exists():
        raise ItemError(f"{name}: BioASQ file {path} does not exist")
    return process(_questions(path, name), name, spec, str(path))
