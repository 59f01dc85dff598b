"""Recorded ReAct trajectories (LADDER §4.4, §F.4 Table 34): the score of a trajectory is the
success flag recorded with it; nothing is re-run.

Record format, one JSON object per line (or a parquet row): `id`, `domain` (the subject the
held-out split is made within), `question`, `steps` (a non-empty list of {`thought`, `action`,
`observation`}; the final step's observation may be null, e.g. after `finish[...]`) and
`success` (true/false). Optional: `answer` (the final answer), `model`, `config` (the ReAct
configuration the record belongs to). Table 34 also reads the zero-shot profiles stated before
the trajectories from `zero_shot.jsonl` beside `test.jsonl` (`selfknow.protocols.ladder.heldout`).
"""
from __future__ import annotations

import pandas as pd

from selfknow.stages.datasets.source import ItemError, at, read_rows, require_fields
from selfknow.records import ITEM_COLUMNS

STEP_KEYS = ("thought", "action", "observation")
COLUMNS = [*ITEM_COLUMNS, "model", "config", "n_steps", "correct"]


def _check_steps(steps, where: str) -> None:
    if not isinstance(steps, list) or not steps:
        raise ItemError(f"{where}: steps must be a non-empty list")
    for k, step in enumerate(steps):
        if not isinstance(step, dict) or any(key not in step for key in STEP_KEYS):
            raise ItemError(f"{where}: step {k} must have the keys {list(STEP_KEYS)}")
        for key in ("thought", "action"):
            if not isinstance(step[key], str):
                raise ItemError(f"{where}: step {k}: {key} must be a string")
        last = k == len(steps) - 1
        if not (isinstance(step["observation"], str) or (last and step["observation"] is None)):
            raise ItemError(f"{where}: step {k}: observation must be a string (null only on the last step)")


def process(rows: list[dict], name: str, where: str) -> pd.DataFrame:
    """One row per trajectory: the item columns (answer = the recorded final answer, "" when
    none; split "test"), `model`, `config`, `n_steps` and `correct` (the success flag as 0/1)."""
    require_fields(rows, ("id", "domain", "question", "steps", "success"), where)
    out, seen = [], set()
    for i, r in enumerate(rows):
        row_where = f"{at(where, i)} (id {r['id']!r})"
        if not isinstance(r["success"], bool):
            raise ItemError(f"{row_where}: success must be true or false, got {r['success']!r}")
        key = (r.get("model"), r.get("config"), str(r["id"]))
        if key in seen:
            raise ItemError(f"{row_where}: duplicate trajectory for model {key[0]!r}, config {key[1]!r}")
        seen.add(key)
        _check_steps(r["steps"], row_where)
        answer = r.get("answer") or ""
        out.append(dict(item_id=str(r["id"]), dataset=name, domain=r["domain"], question=r["question"], choices=None,
                        answer=answer, aliases=[answer] if answer else [], split="test", model=r.get("model"),
                        config=r.get("config"), n_steps=len(r["steps"]), correct=int(r["success"])))
    return pd.DataFrame(out, columns=COLUMNS)


def load(name: str, spec: dict) -> pd.DataFrame:
    """The trajectories of the local file or directory `spec["path"]` (split "test")."""
    rows, where = read_rows(name, spec, "test")
    return process(rows, name, where)
