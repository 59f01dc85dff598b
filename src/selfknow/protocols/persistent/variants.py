"""Training variants of the LoRA verbalized-confidence method as concrete plans (persistent
§3.1.1, §3.2, §4, §B.3, §B.7; Tables 1-4, 11-16, 18, Figure 3, Table 19).

A variant is resolved against a model's ordered checkpoints into a `VariantPlan`: which
adapters to train (each on which checkpoints' *models* — its views — with which checkpoints'
*answers and labels*, how many candidate answers, which labels randomised) and which
(adapter, scoring checkpoint, answering checkpoint) confidences to compute afterwards.
With the paper's running example [C1, C2 | C3, C4] (training | evaluation checkpoints):

- ``nonoracle_multi``   one adapter on C1 and C2 (own answers, top-2 candidates) — Table 1's
  "non-oracle training"; also scored as the surrogate (C2's model with the adapter on C3/C4's
  answers) and copy (C2 on its own answers) ablations (Table 2).
- ``nonoracle_single``  one adapter on C2 only (Table 3 "single-ckpt").
- ``oracle_multi``      one adapter on C3 and C4 (Table 1 "oracle training").
- ``oracle_respective`` one adapter per evaluation checkpoint, each on its own data (Table 3).
- ``*_n1``              the same with the top-1 answer only (Tables 14-15, n_cand = 1).
- ``oracle_single_data`` one adapter on C3 and C4's models, both trained on C3's answers and
  labels (Table 4 "single-ckpt data").
- ``oracle_pooled``     respective adapters, each trained on C3's and C4's data pooled
  (Table 4 "pooled data").
- ``transfer``          one single-answer adapter per checkpoint (all of them), each scored on
  every checkpoint (Figure 3 left); over several seeds also the hidden states of Table 19.
- ``random_label``      top-2 multi-checkpoint training on a pair (Ca, Cb) of consecutive
  checkpoints with Bernoulli(0.5) labels on Cb, scored on every checkpoint (Figure 3 right).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Sequence

MAIN = "main"          # the dataset the adapters train on (its test split)
TRANSFER = "transfer"  # the held-out domain of Table 18


@dataclass(frozen=True)
class AdapterPlan:
    """One adapter: `views` are the checkpoints whose models carry it during training;
    `data[v]` the checkpoints whose (answers, labels) train view v (several = pooled, one
    source each); `random_labels` the views whose labels are Bernoulli(0.5)."""

    name: str
    views: tuple[str, ...]
    data: tuple[tuple[str, tuple[str, ...]], ...]
    n_answers: int
    random_labels: tuple[str, ...] = ()

    def data_for(self, view: str) -> tuple[str, ...]:
        return dict(self.data)[view]


@dataclass(frozen=True)
class Scoring:
    """Confidence of `adapter` read with `scorer`'s model on `target`'s answers to the test
    questions of the main or the transfer dataset."""

    adapter: str
    scorer: str
    target: str
    dataset: str = MAIN


@dataclass(frozen=True)
class VariantPlan:
    variant: str
    adapters: tuple[AdapterPlan, ...]
    scorings: tuple[Scoring, ...]
    hidden_states: bool = False
    #: checkpoints whose train-split answers the adapters need
    train_data: tuple[str, ...] = field(default=())

    def twin_scorings(self, source: "VariantPlan") -> dict[Scoring, Scoring] | None:
        """Each of this plan's scorings as the same computation in `source`: the adapter of
        `source` trained alike (views, data, answers, random labels; names differ), the same
        scorer, target and dataset. None when one has no twin. With a twin for every scoring,
        this variant's confidences are rows of `source`'s table of the same seed."""
        twin = {}
        for a in self.adapters:
            match = [b.name for b in source.adapters if replace(b, name=a.name) == a]
            if not match:
                return None
            twin[a.name] = match[0]
        have = set(source.scorings)
        pairs = {s: replace(s, adapter=twin[s.adapter]) for s in self.scorings}
        return pairs if set(pairs.values()) <= have else None

    def test_targets(self, dataset: str = MAIN) -> list[str]:
        """Checkpoints whose test answers (of `dataset`) the scorings read, in order."""
        return list(dict.fromkeys(s.target for s in self.scorings if s.dataset == dataset))


#: variant -> (setting, short description); setting "table" variants run with every seed
VARIANTS: dict[str, str] = {
    "nonoracle_multi": "multi-checkpoint training on the non-oracle training checkpoints, top-2 answers",
    "nonoracle_multi_n1": "as nonoracle_multi, top-1 answer",
    "nonoracle_single": "single-checkpoint training on the last non-oracle checkpoint, top-2 answers",
    "nonoracle_single_n1": "as nonoracle_single, top-1 answer",
    "oracle_multi": "multi-checkpoint training on the evaluation checkpoints, top-2 answers",
    "oracle_multi_n1": "as oracle_multi, top-1 answer",
    "oracle_respective": "one adapter per evaluation checkpoint, top-2 answers",
    "oracle_respective_n1": "as oracle_respective, top-1 answer",
    "oracle_single_data": "multi-checkpoint views of the evaluation checkpoints, first one's data for all",
    "oracle_pooled": "one adapter per evaluation checkpoint, each on the pooled data of all of them",
    "transfer": "one single-answer adapter per checkpoint, scored on every checkpoint",
    "random_label": "pairs of checkpoints, the second with random labels, scored on every checkpoint",
}


def n_answers(variant: str) -> int:
    """Candidate answers per question a variant's adapters train on (the authors'
    `n_max_cand`): 1 for the `_n1` variants and `transfer` (their `_5k` configs set none, and
    `load_train_config` defaults it to 1), else 2 (their `_ncand2*` configs)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    return 1 if variant.endswith("_n1") or variant == "transfer" else 2
#: variants whose adapters are also scored on the transfer dataset (Table 18)
TRANSFER_VARIANTS = ("nonoracle_multi", "oracle_multi")
#: variants of the metric tables (run with every configured seed)
TABLE_VARIANTS = tuple(v for v in VARIANTS if v not in ("transfer", "random_label"))


def transfer_slices(train_ckpts: Sequence[str], eval_ckpts: Sequence[str]) -> tuple[str, ...]:
    """The metric-table variants whose every scoring has a twin in the `transfer` variant
    (`VariantPlan.twin_scorings`): the single-answer respective and single-checkpoint ones.
    A variant also scored on the transfer dataset (Table 18) is never one."""
    source = plan_variant("transfer", train_ckpts, eval_ckpts)
    return tuple(v for v in TABLE_VARIANTS
                 if plan_variant(v, train_ckpts, eval_ckpts, with_transfer=v in TRANSFER_VARIANTS)
                 .twin_scorings(source) is not None)


def random_label_pairs(checkpoints: Sequence[str], mode: str = "consecutive") -> list[tuple[str, str]]:
    """Training pairs (first, second-with-random-labels) of Figure 3 (right): consecutive
    checkpoints, or every ordered pair first < second (``mode="all"``)."""
    ck = list(checkpoints)
    if mode == "consecutive":
        return list(zip(ck[:-1], ck[1:]))
    if mode == "all":
        return list(combinations(ck, 2))
    raise ValueError(f"random_label_pairs mode must be 'consecutive' or 'all', got {mode!r}")


def _own(name, views, n, data=None, random=()):
    data = data or {v: (v,) for v in views}
    return AdapterPlan(name, tuple(views), tuple((v, tuple(data[v])) for v in views), n, tuple(random))


def plan_variant(variant: str, train_ckpts: Sequence[str], eval_ckpts: Sequence[str], *,
                 with_transfer: bool = False, pair_mode: str = "consecutive") -> VariantPlan:
    """Resolve `variant` (a key of `VARIANTS`) for a model whose non-oracle training
    checkpoints are `train_ckpts` and evaluation checkpoints `eval_ckpts` (training order).
    `with_transfer` adds scorings on the transfer dataset for `TRANSFER_VARIANTS`."""
    tr, ev = list(train_ckpts), list(eval_ckpts)
    if not tr or len(ev) < 2:
        raise ValueError(f"need >= 1 training and >= 2 evaluation checkpoints, got {tr} and {ev}")
    if set(tr) & set(ev):
        raise ValueError(f"checkpoints {sorted(set(tr) & set(ev))} are both training and evaluation")
    own = lambda adapter, ckpts, ds=MAIN: [Scoring(adapter, c, c, ds) for c in ckpts]  # noqa: E731
    n = n_answers(variant) if variant in VARIANTS else 0
    base = variant.removesuffix("_n1")
    hidden = False
    if base == "nonoracle_multi":
        adapters = [_own("multi", tr, n)]
        scorings = own("multi", ev)
        if variant == "nonoracle_multi":
            last = tr[-1]
            scorings += [Scoring("multi", last, c, MAIN) for c in ev]  # surrogate
            scorings += [Scoring("multi", last, last, MAIN)]  # copy source
    elif base == "nonoracle_single":
        adapters = [_own("single", tr[-1:], n)]
        scorings = own("single", ev)
    elif base == "oracle_multi":
        adapters = [_own("multi", ev, n)]
        scorings = own("multi", ev)
    elif base == "oracle_respective":
        adapters = [_own(c, [c], n) for c in ev]
        scorings = [Scoring(c, c, c, MAIN) for c in ev]
    elif variant == "oracle_single_data":
        adapters = [_own("multi", ev, n, data={c: (ev[0],) for c in ev})]
        scorings = own("multi", ev)
    elif variant == "oracle_pooled":
        adapters = [_own(c, [c], n, data={c: tuple(ev)}) for c in ev]
        scorings = [Scoring(c, c, c, MAIN) for c in ev]
    elif variant == "transfer":
        every = tr + ev
        adapters = [_own(c, [c], n) for c in every]
        scorings = [Scoring(a, c, c, MAIN) for a in every for c in every]
        hidden = True
    elif variant == "random_label":
        every = tr + ev
        adapters = [_own(f"{a}+{b}", [a, b], n, random=(b,)) for a, b in random_label_pairs(every, pair_mode)]
        scorings = [Scoring(ad.name, c, c, MAIN) for ad in adapters for c in every]
    else:
        raise ValueError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    if with_transfer and variant in TRANSFER_VARIANTS:
        scorings += [Scoring(s.adapter, s.scorer, s.target, TRANSFER)
                     for s in scorings if s.scorer == s.target and s.target in ev and s.dataset == MAIN]
    data_ckpts = list(dict.fromkeys(c for a in adapters for _, d in a.data for c in d))
    return VariantPlan(variant, tuple(adapters), tuple(scorings), hidden, tuple(data_ckpts))
