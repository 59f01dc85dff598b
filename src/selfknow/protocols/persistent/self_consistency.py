"""Self-consistency confidence from weighted beams (persistent §3.1.1, §A.6) and the SC
surrogate ablation (§3.2, §A.6).

Beam search (10 beams, stop at the first newline) gives candidate texts with sequence
log-probabilities. Each beam is weighted by its sequence probability *normalised over the
returned beams* (a softmax of the beam log-probabilities, as the authors' `gen_cands.py`
does with `sequences_scores` at length penalty 0). Beams whose answer is empty are dropped
from the groups but keep their share of the normalisation, so a question whose beams are
mostly empty gets a low confidence. Equivalent answers are grouped (equal forms under the
equivalence's normaliser first, then the pluggable `Equivalence` between the remaining
groups, closed transitively);
a group's probability is the sum of its beams' weights. The prediction is the top group's
highest-probability member, the SC confidence that group's probability.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.stages.judge import normalise_answer
from selfknow.models.base import Beam

from .equivalence import Equivalence, is_answer


@dataclass(frozen=True)
class AnswerGroup:
    """A candidate answer: equivalent beam answers (best first) and their summed weight."""

    members: tuple[str, ...]
    probability: float

    @property
    def answer(self) -> str:
        """The group's representative: its highest-probability member."""
        return self.members[0]


def clean_answer(text: str | None) -> str:
    """The answer a beam commits to: its text up to the first newline, stripped (§A.6)."""
    if text is None:
        return ""
    return str(text).split("\n", 1)[0].strip()


def beam_weights(logprobs: Sequence[float]) -> np.ndarray:
    """Sequence probabilities normalised over the returned beams (softmax of log-probs).
    Non-finite log-probabilities get weight 0; all non-finite -> all zeros."""
    lp = np.asarray(logprobs, dtype=float)
    if lp.size == 0:
        return lp
    finite = np.isfinite(lp)
    if not finite.any():
        return np.zeros_like(lp)
    w = np.zeros_like(lp)
    z = lp[finite] - lp[finite].max()
    w[finite] = np.exp(z) / np.exp(z).sum()
    return w


def group_answers(question: str, answers: Sequence[str], weights: Sequence[float],
                  equivalence: Equivalence | None, raw: Sequence[str] | None = None) -> list[AnswerGroup]:
    """Group `answers` (already cleaned) with their `weights`, as the authors'
    `group_answers` (conset/gen_cands.py) does under the equivalence's normaliser; `raw`
    (default: `answers`) the beams' decoded texts uncut, which an NLI equivalence reads, as
    the authors' `run_nli` reads their decoded beams.

    Beams that are no answer (`equivalence.is_answer`: empty; under SQuAD normalisation
    also articles and punctuation only) are skipped. Stage 1 merges answers with equal
    normalised forms (`equivalence.normalise`, SQuAD's when `equivalence` is None). Stage 2
    asks `equivalence` about every pair of stage-1 groups and merges connected components
    (union-find), as the authors do with pairwise NLI: an equivalence that reads the forms
    only is asked about each group's best member, any other (NLI) about every pair of distinct
    member texts, a pair of groups merging when one of them holds. Groups come back by
    decreasing probability; ties keep first-appearance order. Members inside a group are
    ordered by decreasing weight (first appearance breaks ties).
    """
    w = np.asarray(weights, dtype=float)
    if len(answers) != w.size:
        raise ValueError(f"{len(answers)} answers but {w.size} weights")
    normalise = equivalence.normalise if equivalence is not None else normalise_answer
    order: dict[str, list[int]] = {}  # normalised form -> indices, in first-appearance order
    for i, a in enumerate(answers):
        if is_answer(a, normalise):
            order.setdefault(normalise(a), []).append(i)
    stage1 = list(order.values())

    parent = list(range(len(stage1)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    if equivalence is not None and len(stage1) > 1:
        if equivalence.reads_forms_only:
            texts = [[answers[max(idx, key=lambda i: (w[i], -i))]] for idx in stage1]
        else:
            read = answers if raw is None else raw
            texts = [list(dict.fromkeys(read[i] for i in idx)) for idx in stage1]
        asked = [(i, j, a, b) for i in range(len(stage1)) for j in range(i + 1, len(stage1))
                 for a in texts[i] for b in texts[j]]
        verdicts = equivalence.equivalent_many(question, [(a, b) for _, _, a, b in asked])
        for (i, j, _, _), same in zip(asked, verdicts):
            if same:
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)

    merged: dict[int, list[int]] = {}
    for g, idx in enumerate(stage1):
        merged.setdefault(find(g), []).extend(idx)
    groups = []
    for idx in merged.values():
        idx = sorted(idx, key=lambda i: (-w[i], i))
        members: list[str] = []
        for i in idx:  # one copy of each distinct text, best first
            if answers[i] not in members:
                members.append(answers[i])
        groups.append((float(w[idx].sum()), min(idx), AnswerGroup(tuple(members), float(w[idx].sum()))))
    groups.sort(key=lambda t: (-t[0], t[1]))
    return [g for _, _, g in groups]


def self_consistency(beams: Sequence[Beam], equivalence: Equivalence | None, *,
                     question: str = "") -> tuple[str, float, list[AnswerGroup]]:
    """(prediction, confidence, groups) for one question's beams (§3.1.1).

    prediction = highest-probability member of the top group ("" when every beam is empty);
    confidence = that group's summed normalised beam probability (0 when no group).
    """
    answers = [clean_answer(b.text) for b in beams]
    weights = beam_weights([b.logprob for b in beams])
    raw = [b.text if b.raw is None else b.raw for b in beams]
    groups = group_answers(question, answers, weights, equivalence, raw)
    if not groups:
        return "", 0.0, []
    return groups[0].answer, groups[0].probability, groups


BEAM_COLUMNS = ("item_id", "question", "text", "logprob")


def self_consistency_frame(beams: pd.DataFrame, equivalence: Equivalence | None) -> pd.DataFrame:
    """SC for every item of a long beam table (one row per beam: item_id, question, text,
    logprob, optionally raw; row order within an item is irrelevant).

    Returns one row per item_id (first-appearance order): item_id, question, prediction,
    confidence, group_answers (list of representatives, best first), group_probs (their
    probabilities), group_members (list of member lists) — parquet-friendly lists.
    """
    missing = [c for c in BEAM_COLUMNS if c not in beams.columns]
    if missing:
        raise ValueError(f"beam table lacks columns {missing}; has {list(beams.columns)}")
    rows = []
    for item_id, df in beams.groupby("item_id", sort=False):
        question = str(df["question"].iloc[0])
        raws = df["raw"] if "raw" in df.columns else [None] * len(df)
        bs = [Beam(str(t) if t is not None else "", float(lp), r if isinstance(r, str) else None)
              for t, lp, r in zip(df["text"], df["logprob"], raws)]
        pred, conf, groups = self_consistency(bs, equivalence, question=question)
        rows.append({
            "item_id": item_id, "question": question, "prediction": pred, "confidence": conf,
            "group_answers": [g.answer for g in groups],
            "group_probs": [g.probability for g in groups],
            "group_members": [list(g.members) for g in groups],
        })
    return pd.DataFrame(rows, columns=["item_id", "question", "prediction", "confidence",
                                       "group_answers", "group_probs", "group_members"])


def candidates_frame(sc: pd.DataFrame, n_answers: int) -> pd.DataFrame:
    """The top `n_answers` candidate answers per item from `self_consistency_frame`, one row
    each (item_id, question, rank, answer, probability) — what multi-answer training judges
    and trains on (§3.1.1: top-2 candidates, weighted by generation probability)."""
    if n_answers < 1:
        raise ValueError(f"n_answers must be >= 1, got {n_answers}")
    rows = []
    for r in sc.itertuples(index=False):
        for rank, (a, p) in enumerate(zip(list(r.group_answers)[:n_answers],
                                          list(r.group_probs)[:n_answers])):
            rows.append({"item_id": r.item_id, "question": r.question, "rank": rank,
                         "answer": a, "probability": float(p)})
    return pd.DataFrame(rows, columns=["item_id", "question", "rank", "answer", "probability"])


def surrogate_confidence(question: str, answer: str, surrogate_groups: Sequence[AnswerGroup],
                         equivalence: Equivalence | None) -> float:
    """SC surrogate (§A.6): the surrogate checkpoint's summed probability over its candidate
    groups equivalent to `answer` (0 if none). A group matches when any member equals `answer`
    after the equivalence's normalisation or `equivalence` says so (conset/sc_surrogate.py); a new answer can bridge several groups,
    whose masses then add (as in the authors' sc_surrogate.py)."""
    normalise = equivalence.normalise if equivalence is not None else normalise_answer
    answer = clean_answer(answer)
    if not is_answer(answer, normalise):
        return 0.0
    key = normalise(answer)
    total = 0.0
    for g in surrogate_groups:
        if any(normalise(m) == key for m in g.members):
            total += g.probability
            continue
        if equivalence is not None and any(
                equivalence.equivalent_many(question, [(answer, m) for m in g.members])):
            total += g.probability
    return float(total)


def surrogate_frame(targets: pd.DataFrame, surrogate_sc: pd.DataFrame,
                    equivalence: Equivalence | None) -> pd.DataFrame:
    """SC-surrogate confidences for another checkpoint's answers.

    `targets`: item_id, prediction (that checkpoint's answers); `surrogate_sc`: the surrogate
    checkpoint's `self_consistency_frame`. Returns targets' item_id, prediction, confidence.
    Items the surrogate has no beams for raise (a silent 0 would hide a broken join)."""
    for name, df, cols in (("targets", targets, ("item_id", "prediction")),
                           ("surrogate_sc", surrogate_sc, ("item_id", "question", "group_members",
                                                           "group_probs"))):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"{name} lacks columns {missing}")
    by_item = surrogate_sc.set_index("item_id")
    absent = sorted(set(targets["item_id"]) - set(by_item.index))
    if absent:
        raise KeyError(f"surrogate has no beams for item_ids {absent[:10]} ({len(absent)} in all)")
    conf = []
    for item_id, pred in zip(targets["item_id"], targets["prediction"]):
        row = by_item.loc[item_id]
        groups = [AnswerGroup(tuple(m), float(p))
                  for m, p in zip(row["group_members"], row["group_probs"])]
        conf.append(surrogate_confidence(str(row["question"]), "" if pred is None else str(pred),
                                         groups, equivalence))
    return pd.DataFrame({"item_id": targets["item_id"].to_numpy(),
                         "prediction": targets["prediction"].to_numpy(),
                         "confidence": np.asarray(conf, dtype=float)})
