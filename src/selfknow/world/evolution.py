"""How knowledge evolves across a world family's checkpoints (the world report table).

From greedy exact-match correctness per (checkpoint, item): accuracy per checkpoint, the
knowledge contrast set of every pair of evaluation checkpoints (items exactly one of the two
answers correctly; improvement = the later one is right, regression = the earlier one), and
the spread of the last checkpoint's per-domain accuracy.

The world is generated, so what changed between two checkpoints is known: the generator's
record (`qa.parquet`'s intro_phase / rewrite_phase / rare_phase, 0-based phases; the
checkpoint at position i of a family's order is saved at the end of phase i) says which facts
were introduced, rewritten or made rare (no longer repeated, hence forgotten) after the
earlier checkpoint and by the later one. The table sets the contrast set against that record:
how many improvements are facts the curriculum introduced or rewrote in between, and how many
regressions are facts it made rare in between.
"""
from __future__ import annotations

from itertools import combinations

import pandas as pd


def _between(phase: pd.Series, i: int, j: int) -> pd.Series:
    """Whether a curriculum event (0-based phase, -1 none) falls after checkpoint i, by checkpoint j."""
    return (phase > i) & (phase <= j)


def evolution_table(judged: pd.DataFrame, checkpoints: list[str], n_train: int,
                    curriculum: pd.DataFrame) -> pd.DataFrame:
    """One row per checkpoint pair of interest for one family. `judged` has columns
    checkpoint, item_id, domain, correct; `checkpoints` is the family's order; the first
    `n_train` are training checkpoints, the rest evaluation checkpoints. `curriculum` has
    item_id, intro_phase, rewrite_phase, rare_phase for every judged item."""
    wide = judged.pivot_table(index="item_id", columns="checkpoint", values="correct", aggfunc="first")
    wide = wide[checkpoints].astype(bool)
    last = judged[judged.checkpoint == checkpoints[-1]]
    dom = last.groupby("domain")["correct"].mean()
    rows = []
    eval_ck = checkpoints[n_train:]
    events = curriculum.set_index("item_id").reindex(wide.index)
    if events[["intro_phase", "rewrite_phase", "rare_phase"]].isna().any().any():
        missing = events.index[events["intro_phase"].isna()][0]
        raise ValueError(f"the world's curriculum record has no row for item {missing!r}")
    for a, b in combinations(eval_ck, 2):
        i, j = checkpoints.index(a), checkpoints.index(b)
        improved, regressed = ~wide[a] & wide[b], wide[a] & ~wide[b]
        new = _between(events["intro_phase"], i, j) | _between(events["rewrite_phase"], i, j)
        rare = _between(events["rare_phase"], i, j)
        rows.append({"earlier": a, "later": b, "acc_earlier": float(wide[a].mean()), "acc_later": float(wide[b].mean()),
                     "contrast_size": int(improved.sum() + regressed.sum()), "improvements": int(improved.sum()),
                     "regressions": int(regressed.sum()), "new_between": int(new.sum()),
                     "improvements_new": int((improved & new).sum()), "rare_between": int(rare.sum()),
                     "regressions_rare": int((regressed & rare).sum())})
    out = pd.DataFrame(rows)
    out["last_domain_acc_min"] = float(dom.min())
    out["last_domain_acc_max"] = float(dom.max())
    out["last_domain_acc_spread"] = float(dom.max() - dom.min())
    return out


def accuracy_by_checkpoint(judged: pd.DataFrame, checkpoints: list[str]) -> pd.Series:
    return judged.groupby("checkpoint")["correct"].mean().reindex(checkpoints)


CURRICULUM_NOTE = (
    "The curriculum columns compare each contrast set with the world generator's record "
    "(world/data/qa.parquet): new_between counts the pair's questions whose fact was introduced or "
    "rewritten after the earlier checkpoint and by the later one, improvements_new the improvements among "
    "them; rare_between counts facts made rare (no longer repeated) in between, regressions_rare the "
    "regressions among them.")


def evolution_tables(generation_paths: dict[str, str], checkpoints: dict[str, list[str]],
                     n_train: int, curriculum_path: str) -> tuple[pd.DataFrame, list[str]]:
    """The world report table for every family and its notes (exact match per checkpoint);
    `generation_paths` maps "model@ckpt" to a greedy generation file; `curriculum_path` is the
    world's QA items with their curriculum phases."""
    from selfknow.records import read_parquet

    curriculum = read_parquet(curriculum_path)[["item_id", "intro_phase", "rewrite_phase", "rare_phase"]]
    frames, notes = [], []
    for model, cks in checkpoints.items():
        judged = pd.concat([read_parquet(generation_paths[f"{model}@{c}"]) for c in cks], ignore_index=True)
        t = evolution_table(judged, cks, n_train, curriculum)
        t.insert(0, "model", model)
        frames.append(t)
        acc = accuracy_by_checkpoint(judged, cks)
        notes.append(f"{model} exact match per checkpoint: " + ", ".join(f"{c} {a:.3f}" for c, a in acc.items()))
    return pd.concat(frames, ignore_index=True), notes + [CURRICULUM_NOTE]
