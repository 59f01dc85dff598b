"""Paired, class-stratified, shared-sequence bootstrap of the persistent paper (§A.8).

A replicate D^b is built from one infinite i.i.d. sequence Q^b of questions drawn uniformly
with replacement from all n items. Every *component* — an evaluation checkpoint (classes
correct / incorrect, for the full-set metrics) or a retained contrast pair (classes
improvement / regression, for the contrast metrics) — walks the same Q^b and takes a question
when it belongs to one of its classes whose quota (that class's size in the original data) is
not yet filled, stopping when both quotas are met. So every replicate keeps the class counts
of every stratum, and components built from the same draws stay dependent (a question drawn
early is likely to enter every checkpoint). The draws depend only on correctness, never on
confidences, so one set of replicates is shared by every method (paired comparison) and every
training seed; a metric is averaged over a method's seeds inside each replicate (Eq. 2).
Contrast-set confidences are normalised once on the original data and then frozen (also the
authors' choice: the §B.1 map is not refitted per replicate).

Vectorisation. Each replicate has its own random stream (``SeedSequence(seed).spawn``), read
in blocks of ``block`` draws; a (B, L) matrix of draws gives, per component and class, the
accepted positions by a cumulative count, and the replicate becomes a (B, n) matrix of
multiplicities per component. All ten metrics are then computed from multiplicities for all
replicates at once: AUC as a weighted Mann-Whitney statistic (each positive's rank among the
negatives is fixed, so only a cumulative sum of negative multiplicities per replicate is
needed; ties count 1/2), Brier and Δ by matrix-vector products, SmoothECE by
``smooth_ece_batch``. Multiplicities are stored item-major, (C, n, B).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np

from .contrast import (CONTRAST_METRICS, FULL_METRICS, METRICS, ContrastPair, Normaliser,
                       _check_conf, _check_correct, pair_data)
from .smooth_ece import smooth_ece_multi

N_BOOT = 10_000
SEED = 17


# ------------------------------------------------------------------------------------------
# Replicate construction
# ------------------------------------------------------------------------------------------

def component_classes(correct, pairs: Sequence[ContrastPair]) -> np.ndarray:
    """(n_ckpt + n_pairs, n_items) int8 stratum labels: for checkpoint rows 1 = correct,
    0 = incorrect; for pair rows 1 = improvement, 0 = regression, -1 = not in the contrast set."""
    y = _check_correct(correct)
    out = np.full((y.shape[0] + len(pairs), y.shape[1]), -1, dtype=np.int8)
    out[: y.shape[0]] = y.astype(np.int8)
    for j, p in enumerate(pairs):
        out[y.shape[0] + j, p.items] = p.improvement.astype(np.int8)
    return out


def replicate_rngs(seed: int, n_boot: int) -> list[np.random.Generator]:
    """One independent generator per replicate, so a replicate does not depend on how the
    replicates are batched (and a per-replicate loop can reproduce it)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n_boot)]


def draw_block(rng: np.random.Generator, n_items: int, block: int) -> np.ndarray:
    """The next ``block`` questions of a replicate's sequence (uniform, with replacement)."""
    return rng.integers(0, n_items, size=block, dtype=np.int32)


def default_block(classes: np.ndarray) -> int:
    """Draws read per block: the number of draws needed to fill a class of size m out of n is
    negative binomial with mean n and sd sqrt(n (n - m) / m); cover the worst class + 6 sd."""
    n = classes.shape[1]
    sizes = np.array([(classes == c).sum(axis=1) for c in (0, 1)]).ravel()
    sizes = sizes[sizes > 0]
    sd = np.sqrt(n * (n - sizes) / sizes).max() if sizes.size else 0.0
    return int(np.ceil(n + 6 * sd + 64))


def select_from_sequence(sequence: np.ndarray, classes: np.ndarray, quotas: np.ndarray):
    """Apply the §A.8 quota rule to sequences of drawn questions.

    ``sequence``: (B, L) item indices; ``classes``: (C, n) stratum labels; ``quotas``: (C, 2)
    class sizes. Returns (accepted (C, B, L) bool, filled (B,) bool: every quota met within L).
    Position t is accepted for component j when the question's class c in j has been seen at
    most quotas[j, c] times up to and including t."""
    n_comp = classes.shape[0]
    accepted = np.zeros((n_comp,) + sequence.shape, dtype=bool)
    filled = np.ones(sequence.shape[0], dtype=bool)
    for j in range(n_comp):
        cls = classes[j][sequence]
        for c in (0, 1):
            q = quotas[j, c]
            if q == 0:
                continue
            member = cls == c
            seen = np.cumsum(member, axis=1, dtype=np.int32)
            accepted[j] |= member & (seen <= q)
            filled &= seen[:, -1] >= q
    return accepted, filled


def _counts_from_accepted(sequence: np.ndarray, accepted: np.ndarray, n_items: int) -> np.ndarray:
    """(C, n, B) float multiplicities: item-major, so per-item gathers and cumulative sums
    over items run along contiguous replicate rows."""
    n_comp, n_rep, _ = accepted.shape
    keys = (np.multiply(sequence, n_rep, dtype=np.int64) + np.arange(n_rep)[:, None]).ravel()
    out = np.empty((n_comp, n_items, n_rep))
    for j in range(n_comp):
        out[j] = np.bincount(keys[accepted[j].ravel()],
                             minlength=n_items * n_rep).reshape(n_items, n_rep)
    return out


def _replicate_counts_t(classes: np.ndarray, n_boot: int, seed: int, chunk: int,
                        block: int | None) -> Iterator[np.ndarray]:
    """Successive chunks of (C, n, b) multiplicities (see ``replicate_counts``)."""
    classes = np.asarray(classes, dtype=np.int8)
    n_items = classes.shape[1]
    quotas = np.stack([(classes == 0).sum(axis=1), (classes == 1).sum(axis=1)], axis=1)
    block = default_block(classes) if block is None else int(block)
    rngs = replicate_rngs(seed, n_boot)
    for start in range(0, n_boot, chunk):
        gens = rngs[start: start + chunk]
        seq = np.stack([draw_block(g, n_items, block) for g in gens])
        accepted, filled = select_from_sequence(seq, classes, quotas)
        counts = _counts_from_accepted(seq, accepted, n_items)
        for r in np.flatnonzero(~filled):
            # Rare: this replicate's quotas need more draws; continue its own stream.
            row = seq[r]
            while True:
                row = np.concatenate([row, draw_block(gens[r], n_items, block)])
                acc_r, ok = select_from_sequence(row[None], classes, quotas)
                if ok[0]:
                    break
            counts[:, :, r] = _counts_from_accepted(row[None], acc_r, n_items)[:, :, 0]
        yield counts


def replicate_counts(classes: np.ndarray, n_boot: int = N_BOOT, seed: int = SEED, *,
                     chunk: int = 256, block: int | None = None) -> Iterator[np.ndarray]:
    """Yield (b, C, n) multiplicities of successive chunks of replicates (b <= ``chunk``):
    counts[r, j, i] = how many times item i enters component j in replicate r."""
    for counts_t in _replicate_counts_t(classes, n_boot, seed, chunk, block):
        yield np.moveaxis(counts_t, 2, 0)


# ------------------------------------------------------------------------------------------
# Metrics from multiplicities
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _AucPoints:
    """Positive and negative points, with each positive's rank among the sorted negatives."""

    pos: np.ndarray  # indices of positive points
    neg_order: np.ndarray  # indices of negative points, by increasing score
    below: np.ndarray  # per positive: number of negatives with a lower score
    below_or_tied: np.ndarray  # ... with a lower or equal score

    @classmethod
    def of(cls, score: np.ndarray, label: np.ndarray) -> "_AucPoints":
        pos = np.flatnonzero(label == 1)
        neg = np.flatnonzero(label != 1)
        neg_order = neg[np.argsort(score[neg], kind="stable")]
        neg_sorted = score[neg_order]
        return cls(pos, neg_order, np.searchsorted(neg_sorted, score[pos], side="left"),
                   np.searchsorted(neg_sorted, score[pos], side="right"))

    def auc(self, weights_t: np.ndarray) -> np.ndarray:
        """Weighted Mann-Whitney AUC (ties count 1/2) for each column of (N, B) multiplicities:
        sum over positives of w * (negative weight below + half the tied negative weight)."""
        cum = np.zeros((self.neg_order.size + 1, weights_t.shape[1]))
        np.cumsum(weights_t[self.neg_order], axis=0, out=cum[1:])
        wp = weights_t[self.pos]
        num = np.sum(wp * (cum[self.below] + cum[self.below_or_tied]), axis=0) / 2
        return num / (wp.sum(axis=0) * cum[-1])


class _SeedScorer:
    """Everything one seed of one method needs to score replicates."""

    def __init__(self, conf: np.ndarray, correct: np.ndarray, pairs: Sequence[ContrastPair],
                 normaliser: Normaliser):
        self.conf = conf
        self.correct = correct
        n_ckpt = correct.shape[0]
        self.full_auc = _AucPoints.of(conf.ravel(), correct.ravel())
        self.full_sq = ((conf - correct) ** 2).ravel()
        self.pairs = []
        for p in pairs:
            d = pair_data(conf, p, normaliser)
            q = np.concatenate([d.q_early, d.q_late])
            y = np.concatenate([d.y_early, 1 - d.y_early])
            self.pairs.append({
                "items": p.items, "d": d, "imp": d.improvement,
                "auc": _AucPoints.of(q, y),
                "sq": (d.q_early - d.y_early) ** 2 + (d.q_late - (1 - d.y_early)) ** 2,
            })
        self.n_ckpt = n_ckpt
        self.n_items = correct.shape[1]

    def score(self, counts_t: np.ndarray, wanted: Sequence[str]) -> dict[str, np.ndarray]:
        """Metrics for a (C, n, b) chunk of multiplicities."""
        b = counts_t.shape[2]
        k = self.n_ckpt
        out: dict[str, np.ndarray] = {}
        full = counts_t[:k].reshape(-1, b)
        if "full_auc" in wanted:
            out["full_auc"] = self.full_auc.auc(full)
        if "full_brier" in wanted:
            out["full_brier"] = self.full_sq @ full / full[:, 0].sum()
        # All SmoothECE data sets of the chunk share one bandwidth search (see smooth_ece_multi).
        ece_sets = []
        if "full_ece" in wanted:
            ece_sets += [(self.conf[c], self.correct[c], full[c * self.n_items:(c + 1) * self.n_items].T)
                         for c in range(k)]
        if "contrast_ece" in wanted:
            ece_sets += [(p["d"].q_early, p["d"].y_early, counts_t[k + j][p["items"]].T)
                         for j, p in enumerate(self.pairs)]
        eces = smooth_ece_multi(ece_sets) if ece_sets else []
        if "full_ece" in wanted:
            out["full_ece"] = np.mean(eces[:k], axis=0)
            eces = eces[k:]
        if not any(m in wanted for m in CONTRAST_METRICS):
            return out
        per_pair: dict[str, list[np.ndarray]] = {m: [] for m in CONTRAST_METRICS if m in wanted}
        for j, p in enumerate(self.pairs):
            w = counts_t[k + j][p["items"]]  # (n_p, b)
            n_p = p["items"].size
            d, imp = p["d"], p["imp"]
            for name, v in (("delta0", d.sign), ("delta", d.gap)):
                if name in per_pair:
                    per_pair[name].append(v @ w / n_p)
                if name + "_b" in per_pair:
                    if imp.all() or not imp.any():
                        per_pair[name + "_b"].append(v @ w / n_p)
                    else:
                        per_pair[name + "_b"].append(
                            0.5 * (v[imp] @ w[imp] / imp.sum() + v[~imp] @ w[~imp] / (~imp).sum()))
            if "contrast_auc" in per_pair:
                per_pair["contrast_auc"].append(p["auc"].auc(np.concatenate([w, w], axis=0)))
            if "contrast_brier" in per_pair:
                per_pair["contrast_brier"].append(p["sq"] @ w / (2 * n_p))
            if "contrast_ece" in per_pair:
                per_pair["contrast_ece"].append(eces[j])
        for name, vals in per_pair.items():
            out[name] = np.mean(vals, axis=0) if vals else np.full(b, np.nan)
        return out


def bootstrap_persistent(conf_by_method: Mapping[str, np.ndarray], correct,
                         pairs: Sequence[ContrastPair], *, n_boot: int = N_BOOT,
                         seed: int = SEED, normaliser: Normaliser = "eq1",
                         metrics: Sequence[str] = METRICS, chunk: int = 256,
                         block: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Bootstrap distributions of the persistent metrics for several methods on shared,
    paired replicates (§A.8).

    ``conf_by_method``: method -> (n_ckpt, n_items) or (n_seeds, n_ckpt, n_items) confidences
    on the evaluation checkpoints (seeds averaged inside each replicate); ``correct``:
    (n_ckpt, n_items) 0/1; ``pairs``: the retained contrast pairs (``contrast_pairs``).
    Returns method -> metric -> (n_boot,) replicate values.
    """
    y = _check_correct(correct)
    unknown = set(metrics) - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; known: {METRICS}")
    if not conf_by_method:
        raise ValueError("conf_by_method is empty")
    scorers = {}
    for name, conf in conf_by_method.items():
        try:
            c = _check_conf(conf, y.shape)
        except ValueError as err:
            raise ValueError(f"method {name!r}: {err}") from None
        scorers[name] = [_SeedScorer(cs, y, pairs, normaliser) for cs in c]
    classes = component_classes(y, pairs)
    wanted = [m for m in metrics if m in FULL_METRICS or pairs]
    out = {name: {m: np.empty(n_boot) for m in metrics} for name in scorers}
    for name in scorers:
        for m in metrics:
            if m not in wanted:
                out[name][m][:] = np.nan
    start = 0
    for counts in _replicate_counts_t(classes, n_boot, seed, chunk, block):
        stop = start + counts.shape[2]
        for name, seed_scorers in scorers.items():
            per_seed = [s.score(counts, wanted) for s in seed_scorers]
            for m in wanted:
                out[name][m][start:stop] = np.mean([ps[m] for ps in per_seed], axis=0)
        start = stop
    return out
