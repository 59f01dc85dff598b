"""Shared LADDER test inputs: a toy MCQ pool and a scripted answering model whose accuracy per
domain is known (cloze scoring, as the workflow's base models answer)."""
from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

import pandas as pd

from fakes import ScriptedLM


def stable_hash(s: str) -> int:
    return int(hashlib.sha256(s.encode()).hexdigest(), 16)


def make_items(domains: Sequence[str], n_per_domain: int, aliases=None) -> pd.DataFrame:
    """`n_per_domain` four-option items per domain, the reference letter spread over A-D."""
    rows = []
    for d in domains:
        for j in range(n_per_domain):
            rows.append({"item_id": f"{d}/{j}", "dataset": "toy", "domain": d,
                         "question": f"Question {j} about {d}?", "choices": ["w", "x", "y", "z"],
                         "answer": "ABCD"[(j * 7 + len(d)) % 4], "aliases": aliases, "split": "test"})
    return pd.DataFrame(rows)


def answering_lm(items: pd.DataFrame, accuracy: Mapping[str, float], model_id: str = "scripted") -> ScriptedLM:
    """Cloze answering that is right on a hash-chosen share `accuracy[domain]` of the questions:
    the option picked per question scores -0.3, the others lower."""
    ref = {q: (list(c), a, d) for q, c, a, d in zip(items["question"], items["choices"], items["answer"],
                                                     items["domain"])}

    def loglik(context, continuation):
        q = context.removeprefix("Question: ").removesuffix("\nAnswer:")
        choices, gold, dom = ref[q]
        h = stable_hash(context)
        right = (h % 1000) / 1000 < accuracy[dom]
        pick = gold if right else "ABCD"[("ABCD".index(gold) + 1 + h % 3) % 4]
        i = choices.index(continuation.strip())
        return -0.3 if "ABCD"[i] == pick else -2.0 - (h >> (8 + i)) % 3
    return ScriptedLM(lambda p: "", loglik=loglik, model_id=model_id)


def built_only(monkeypatch) -> list[str]:
    """Make every builder that the one table driver (`selfknow.report.tables.write_entries`)
    calls fail unless it returns a `Built`; returns the list the builders' names are appended
    to, in the order they are called."""
    from selfknow.report import catalog
    from selfknow.report.tables import Built

    called, real = [], catalog.call_by_name

    def checked(fn, known):
        out = real(fn, known)
        assert isinstance(out, Built), f"{fn.__module__}.{fn.__name__} returned {type(out).__name__}, not a Built"
        called.append(f"{fn.__module__}:{fn.__name__}")
        return out

    monkeypatch.setattr(catalog, "call_by_name", checked)
    return called
