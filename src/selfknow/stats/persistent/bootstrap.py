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
accepted positions by a cumulative count, and the replicate becomes multiplicities per
component (one bincount each). The first draws, where no quota can plausibly fill, are
tallied once for all components (``head_length``). Two paths: this vectorised one, and the
sequence walked draw by draw (``select_from_sequence`` on one growing sequence) for the rare
replicate that meets a quota inside the head or does not meet every quota within the block.
All ten metrics are then computed from multiplicities for all replicates at once:
AUC as a weighted Mann-Whitney statistic (each positive's rank among the negatives is fixed,
so only a cumulative sum of negative multiplicities per replicate is needed; ties count 1/2),
Brier and Δ by matrix products, SmoothECE by ``smooth_ece_counts``. Multiplicities are stored
item-major, each component's members only (a contrast pair's questions), stacked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from .contrast import (CONTRAST_METRICS, FULL_METRICS, METRICS, ContrastPair, Normaliser, PairData,
                       _check_conf, _check_correct, pair_data)
from ..smooth_ece import smooth_ece_counts

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


def _fill_sd(classes: np.ndarray) -> float | None:
    """The largest sd of the draws needed to fill a class: for a class of size m out of n they
    are negative binomial with mean n and sd sqrt(n (n - m) / m). None without classes."""
    n = classes.shape[1]
    sizes = np.array([(classes == c).sum(axis=1) for c in (0, 1)]).ravel()
    sizes = sizes[sizes > 0]
    return float(np.sqrt(n * (n - sizes) / sizes).max()) if sizes.size else None


def default_block(classes: np.ndarray) -> int:
    """Draws read per block: cover the worst class's expected fill + 6 sd (``_fill_sd``)."""
    sd = _fill_sd(classes)
    return int(np.ceil(classes.shape[1] + 6 * (sd or 0.0) + 64))


class Selection(NamedTuple):
    """The §A.8 quota rule applied to (B, L) sequences of draws."""

    accepted: np.ndarray  # (C, B, L) bool: draw t of replicate b enters component j
    filled: np.ndarray  # (B,) bool: every quota met within the L draws


def select_from_sequence(sequence: np.ndarray, classes: np.ndarray, quotas: np.ndarray,
                         seen_before: np.ndarray | None = None) -> Selection:
    """Apply the §A.8 quota rule to sequences of drawn questions.

    ``sequence``: (B, L) item indices; ``classes``: (C, n) stratum labels; ``quotas``: (C, 2)
    class sizes; ``seen_before``: optional (C, 2, B) class tallies of earlier draws, when
    ``sequence`` continues them. Position t is accepted for component j when the question's
    class c in j has been seen at most quotas[j, c] times up to and including t."""
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
            if seen_before is not None:
                seen += seen_before[j, c][:, None].astype(np.int32)
            accepted[j] |= member & (seen <= q)
            filled &= seen[:, -1] >= q
    return Selection(accepted, filled)


def head_length(classes: np.ndarray) -> int:
    """Draws before which no quota can plausibly be met: 8 sd (of the draws a class needs,
    see ``default_block``) before the earliest expected fill. Every in-class draw there is
    accepted, so the head is tallied and counted once for all components; a replicate that
    meets a quota inside it anyway is redone draw by draw."""
    sd = _fill_sd(classes)
    return 0 if sd is None else max(0, int(classes.shape[1] - 8 * sd))


def _item_major_keys(draws: np.ndarray) -> np.ndarray:
    """Bincount keys item * B + replicate of (B, L) draws, for (n, B) item-major histograms."""
    n_rep = draws.shape[0]
    return (np.multiply(draws, n_rep, dtype=np.int64) + np.arange(n_rep)[:, None]).ravel()


def _class_tally(head: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(C, 2, B) draws of each class of each component among ``head`` (B, P), and the (n, B)
    item histogram of ``head`` they come from."""
    n_rep = head.shape[0]
    n_comp, n_items = classes.shape
    keys = _item_major_keys(head)
    hist = np.bincount(keys, minlength=n_items * n_rep).reshape(n_items, n_rep).astype(float)
    indicator = np.stack([classes == 0, classes == 1], axis=1).reshape(2 * n_comp, n_items)
    return (indicator.astype(float) @ hist).reshape(n_comp, 2, n_rep), hist


def _counts_from_accepted(sequence: np.ndarray, accepted: np.ndarray, member: np.ndarray,
                          head_hist: np.ndarray | None = None) -> np.ndarray:
    """Multiplicities, stacked component by component: rows offset[j]:offset[j+1] of the
    (sum_j n_j, B) result hold component j's n_j members (items with a class in j, ascending;
    ``offsets(member)``). Item-major, so per-item gathers and cumulative sums over items run
    along contiguous replicate rows. In the narrowest unsigned type that holds them (bytes in
    practice): the AUC's gathers and cumulative sums then move an eighth of int64's memory.

    ``member``: (C, n) bool; ``accepted`` (C, B, L - P) covers the last L - P draws; the first
    P are accepted by every component whose classes hold the item (when P > 0, ``head_hist``
    (n, B) counts each item among them)."""
    n_comp, n_rep, n_tail = accepted.shape
    tail = sequence[:, sequence.shape[1] - n_tail:]
    offset = offsets(member)
    replicate = np.broadcast_to(np.arange(n_rep)[:, None], tail.shape)
    wide = np.min_scalar_type(sequence.shape[1])  # no item is drawn more often than there are draws
    head = None if head_hist is None else head_hist.astype(wide)
    out = np.empty((offset[-1], n_rep), dtype=wide)
    for j in range(n_comp):
        row = np.cumsum(member[j]) - 1  # item -> its row among component j's members
        taken = accepted[j]
        block = out[offset[j]:offset[j + 1]]
        keys = row[tail[taken]] * n_rep + replicate[taken]
        block[:] = np.bincount(keys, minlength=block.size).reshape(block.shape)
        if head is not None:
            block += head[member[j]]
    return out.astype(np.min_scalar_type(out.max(initial=0)))


def offsets(member: np.ndarray) -> np.ndarray:
    """Row offsets of the components in the stacked multiplicities (``_counts_from_accepted``)."""
    return np.concatenate([[0], np.cumsum(member.sum(axis=1))])


def _replicate_counts_t(classes: np.ndarray, n_boot: int, seed: int, chunk: int,
                        block: int | None) -> Iterator[np.ndarray]:
    """Successive chunks of stacked (sum_j n_j, b) integer multiplicities
    (``_counts_from_accepted``)."""
    classes = np.asarray(classes, dtype=np.int8)
    n_items = classes.shape[1]
    quotas = np.stack([(classes == 0).sum(axis=1), (classes == 1).sum(axis=1)], axis=1)
    block = default_block(classes) if block is None else int(block)
    head = min(head_length(classes), block)
    member = classes >= 0
    rngs = replicate_rngs(seed, n_boot)
    for start in range(0, n_boot, chunk):
        gens = rngs[start: start + chunk]
        seq = np.stack([draw_block(g, n_items, block) for g in gens])
        tally, head_hist = _class_tally(seq[:, :head], classes)
        accepted, filled = select_from_sequence(seq[:, head:], classes, quotas, seen_before=tally)
        counts = _counts_from_accepted(seq, accepted, member, head_hist)
        in_head = (tally > quotas[:, :, None]).any(axis=(0, 1))
        for r in np.flatnonzero(~filled | in_head):
            # Rare: a quota met inside the head, or not within the block (then the
            # replicate's own stream continues): redo this replicate draw by draw.
            row = seq[r]
            while True:
                acc_r, ok = select_from_sequence(row[None], classes, quotas)
                if ok[0]:
                    break
                row = np.concatenate([row, draw_block(gens[r], n_items, block)])
            redone = _counts_from_accepted(row[None], acc_r, member)
            counts = counts.astype(np.result_type(counts, redone), copy=False)
            counts[:, r] = redone[:, 0]
        yield counts


def replicate_counts(classes: np.ndarray, n_boot: int, seed: int, *,
                     chunk: int = 256, block: int | None = None) -> Iterator[np.ndarray]:
    """Yield (b, C, n) multiplicities of successive chunks of replicates (b <= ``chunk``):
    counts[r, j, i] = how many times item i enters component j in replicate r."""
    member = np.asarray(classes) >= 0
    offset = offsets(member)
    for stacked in _replicate_counts_t(classes, n_boot, seed, chunk, block):
        out = np.zeros((stacked.shape[1],) + member.shape)
        for j in range(member.shape[0]):
            out[:, j, member[j]] = stacked[offset[j]:offset[j + 1]].T
        yield out


# ------------------------------------------------------------------------------------------
# Metrics from multiplicities
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _AucPoints:
    """Positive and negative points, with each positive's rank among the sorted negatives.
    Point p takes the multiplicity of row p % ``fold`` (a contrast pair's two checkpoints
    share their questions' multiplicities)."""

    pos: np.ndarray  # weight rows of the positive points, by increasing score
    neg_order: np.ndarray  # weight rows of the negative points, by increasing score
    below: np.ndarray  # per positive: number of negatives with a lower score
    below_or_tied: np.ndarray  # ... with a lower or equal score
    tied: np.ndarray  # positives that tie some negative

    @classmethod
    def of(cls, score: np.ndarray, label: np.ndarray, fold: int | None = None) -> "_AucPoints":
        pos = np.flatnonzero(label == 1)
        pos = pos[np.argsort(score[pos], kind="stable")]  # monotone gathers in ``auc``
        neg = np.flatnonzero(label != 1)
        neg_order = neg[np.argsort(score[neg], kind="stable")]
        neg_sorted = score[neg_order]
        below = np.searchsorted(neg_sorted, score[pos], side="left")
        below_or_tied = np.searchsorted(neg_sorted, score[pos], side="right")
        tied = np.flatnonzero(below_or_tied > below)
        fold = score.size if fold is None else fold
        return cls(pos % fold, neg_order % fold, below, below_or_tied, tied)

    def auc(self, weights_t: np.ndarray) -> np.ndarray:
        """Weighted Mann-Whitney AUC (ties count 1/2) for each column of (N, B) integer
        multiplicities: sum over positives of w * (negative weight below + half the tied
        negative weight), in exact integer arithmetic."""
        # int32 partial sums where they cannot overflow: half the memory traffic of int64.
        narrow = self.neg_order.size * int(np.iinfo(weights_t.dtype).max) < 2**31
        cum = np.empty((self.neg_order.size + 1, weights_t.shape[1]), dtype=np.int32 if narrow else np.int64)
        cum[0] = 0
        np.cumsum(weights_t[self.neg_order], axis=0, dtype=cum.dtype, out=cum[1:])
        wp = weights_t[self.pos]
        num = np.einsum("ij,ij->j", wp, cum[self.below], dtype=np.int64)
        if 2 * self.tied.size > self.pos.size:  # mostly tied (discrete confidences)
            num = (num + np.einsum("ij,ij->j", wp, cum[self.below_or_tied], dtype=np.int64)) / 2
        elif self.tied.size:
            gap = cum[self.below_or_tied[self.tied]] - cum[self.below[self.tied]]
            num = num + np.einsum("ij,ij->j", wp[self.tied], gap, dtype=np.int64) / 2
        return num / (wp.sum(axis=0, dtype=np.int64) * cum[-1])


@dataclass(frozen=True)
class _Chunk:
    """Multiplicities of a chunk of replicates (``_counts_from_accepted``), as integers (for
    the AUC's exact sums) and as float64 (for matrix products); the first ``n_ckpt``
    components, stacked, form the full set."""

    ints: np.ndarray
    floats: np.ndarray
    offset: np.ndarray
    n_ckpt: int

    def part(self, j: int, floats: bool = True) -> np.ndarray:
        """(n_j, b) multiplicities of component j's members."""
        return (self.floats if floats else self.ints)[self.offset[j]:self.offset[j + 1]]

    def full(self, floats: bool = True) -> np.ndarray:
        """(k n, b) multiplicities of the checkpoints' items, checkpoint by checkpoint."""
        return (self.floats if floats else self.ints)[: self.offset[self.n_ckpt]]


@dataclass(frozen=True)
class _PairScorer:
    """One contrast pair of one seed: its normalised data, AUC points and the rows of
    ``_SeedScorer._LINEAR`` (per-question weights whose product with the multiplicities is
    the metric)."""

    data: PairData
    auc: _AucPoints
    linear: np.ndarray


class _SeedScorer:
    """Everything one seed of one method needs to score replicates."""

    # Contrast metrics that are linear in a pair's multiplicities: one product gives them all.
    _LINEAR = ("delta0", "delta", "delta0_b", "delta_b", "contrast_brier")

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
            n_p, imp = p.items.size, d.improvement
            if imp.all() or not imp.any():  # one class: the balanced mean is the plain mean
                balanced = np.full(n_p, 1 / n_p)
            else:
                balanced = np.where(imp, 0.5 / imp.sum(), 0.5 / (~imp).sum())
            sq = (d.q_early - d.y_early) ** 2 + (d.q_late - (1 - d.y_early)) ** 2
            self.pairs.append(_PairScorer(d, _AucPoints.of(q, y, fold=n_p),
                                          np.stack([d.sign / n_p, d.gap / n_p, d.sign * balanced,
                                                    d.gap * balanced, sq / (2 * n_p)])))
        self.n_ckpt = n_ckpt

    def ece(self, chunk: _Chunk, wanted: Sequence[str]) -> dict[str, np.ndarray]:
        """The SmoothECE metrics of ``chunk``'s replicates. All data sets share one bandwidth
        search (``smooth_ece_counts``)."""
        k = self.n_ckpt
        sets = []
        if "full_ece" in wanted:
            sets += [(self.conf[c], self.correct[c], chunk.part(c).T) for c in range(k)]
        if "contrast_ece" in wanted:
            sets += [(p.data.q_early, p.data.y_early, chunk.part(k + j).T) for j, p in enumerate(self.pairs)]
        eces = [r.value for r in smooth_ece_counts(sets)] if sets else []
        out = {}
        if "full_ece" in wanted:
            out["full_ece"] = np.mean(eces[:k], axis=0)
            eces = eces[k:]
        if "contrast_ece" in wanted:
            out["contrast_ece"] = np.mean(eces, axis=0) if eces else np.full(chunk.ints.shape[1], np.nan)
        return out

    def score(self, chunk: _Chunk, wanted: Sequence[str]) -> dict[str, np.ndarray]:
        """The metrics other than SmoothECE of ``chunk``'s replicates."""
        b = chunk.ints.shape[1]
        k = self.n_ckpt
        out: dict[str, np.ndarray] = {}
        if "full_auc" in wanted:
            out["full_auc"] = self.full_auc.auc(chunk.full(floats=False))
        if "full_brier" in wanted:
            full = chunk.full()
            out["full_brier"] = self.full_sq @ full / full[:, 0].sum()
        per_pair: dict[str, list[np.ndarray]] = {m: [] for m in CONTRAST_METRICS
                                                 if m in wanted and m != "contrast_ece"}
        for j, p in enumerate(self.pairs):
            linear = p.linear @ chunk.part(k + j)
            for name, row in zip(self._LINEAR, linear):
                if name in per_pair:
                    per_pair[name].append(row)
            if "contrast_auc" in per_pair:
                per_pair["contrast_auc"].append(p.auc.auc(chunk.part(k + j, floats=False)))
        for name, vals in per_pair.items():
            out[name] = np.mean(vals, axis=0) if vals else np.full(b, np.nan)
        return out


def bootstrap_persistent(conf_by_method: Mapping[str, np.ndarray], correct,
                         pairs: Sequence[ContrastPair], *, n_boot: int,
                         seed: int, normaliser: Normaliser = "eq1",
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
    offset = offsets(classes >= 0)
    start = 0
    for stacked in _replicate_counts_t(classes, n_boot, seed, chunk, block):
        stop = start + stacked.shape[1]
        counts = _Chunk(stacked, stacked.astype(float), offset, y.shape[0])
        for name, seed_scorers in scorers.items():
            per_seed = [s.score(counts, wanted) | s.ece(counts, wanted) for s in seed_scorers]
            for m in wanted:
                out[name][m][start:stop] = np.mean([ps[m] for ps in per_seed], axis=0)
        start = stop
    return out
