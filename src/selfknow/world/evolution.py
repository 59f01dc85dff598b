"""How knowledge evolves across a world family's checkpoints (the world report table).

From greedy exact-match correctness per (checkpoint, item): accuracy per checkpoint, the
knowledge contrast set of every pair of evaluation checkpoints (items exactly one of the two
answers correctly; improvement = the later one is right, regression = the earlier one), and
the spread of the last checkpoint's per-domain accuracy.
"""
from __future__ import annotations

from itertools import combinations

import pandas as pd


def evolution_table(judged: pd.DataFrame, checkpoints: list[str], n_train: int) -> pd.DataFrame:
    """One row per checkpoint pair of interest for one family. `judged` has columns
    checkpoint, item_id, domain, correct; `checkpoints` is the family's order; the first
    `n_train` are training checkpoints, the rest evaluation checkpoints."""
    wide = judged.pivot_table(index="item_id", columns="checkpoint", values="correct", aggfunc="first")
    wide = wide[checkpoints].astype(bool)
    last = judged[judged.checkpoint == checkpoints[-1]]
    dom = last.groupby("domain")["correct"].mean()
    rows = []
    eval_ck = checkpoints[n_train:]
    for a, b in combinations(eval_ck, 2):
        imp = int((~wide[a] & wide[b]).sum())
        reg = int((wide[a] & ~wide[b]).sum())
        rows.append({"earlier": a, "later": b, "acc_earlier": float(wide[a].mean()), "acc_later": float(wide[b].mean()),
                     "contrast_size": imp + reg, "improvements": imp, "regressions": reg})
    out = pd.DataFrame(rows)
    out["last_domain_acc_min"] = float(dom.min())
    out["last_domain_acc_max"] = float(dom.max())
    out["last_domain_acc_spread"] = float(dom.max() - dom.min())
    return out


def accuracy_by_checkpoint(judged: pd.DataFrame, checkpoints: list[str]) -> pd.Series:
    return judged.groupby("checkpoint")["correct"].mean().reindex(checkpoints)


def evolution_tables(generation_paths: dict[str, str], checkpoints: dict[str, list[str]],
                     n_train: int) -> tuple[pd.DataFrame, list[str]]:
    """The world report table for every family and its notes (exact match per checkpoint);
    `generation_paths` maps "model@ckpt" to a greedy generation file."""
    from selfknow.records import read_parquet

    frames, notes = [], []
    for model, cks in checkpoints.items():
        judged = pd.concat([read_parquet(generation_paths[f"{model}@{c}"]) for c in cks], ignore_index=True)
        t = evolution_table(judged, cks, n_train)
        t.insert(0, "model", model)
        frames.append(t)
        acc = accuracy_by_checkpoint(judged, cks)
        notes.append(f"{model} exact match per checkpoint: " + ", ".join(f"{c} {a:.3f}" for c, a in acc.items()))
    return pd.concat(frames, ignore_index=True), notes
