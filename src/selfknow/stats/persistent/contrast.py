"""Knowledge contrast sets and the ten metrics of persistent calibration (Tables 11-13).

Paper: "Evaluating Persistent Calibration under Evolving Model Knowledge", §2, §A.1-§A.3.

Inputs are per-(checkpoint, item) arrays over the *evaluation* checkpoints, rows in training
order (row 0 the earliest): ``conf`` the confidence each checkpoint gives its own answer,
``correct`` its 0/1 correctness. A method with several training seeds passes ``conf`` as
(n_seeds, n_ckpt, n_items); every metric is then the mean over seeds (Eq. 2, §A.8.1).

The ten metrics, in the column order of Tables 1/11-13:

contrast set (for each retained pair of evaluation checkpoints k < k', then averaged over pairs)
  ``delta0_b``  Δ0^b: class-balanced mean of sign(p+ - p-) (ties 0): (improvement-class mean +
                regression-class mean) / 2
  ``delta0``    Δ0: mean of sign(p+ - p-) over the pair's contrast questions
  ``delta_b``   Δ^b: class-balanced mean of p+' - p-'
  ``delta``     Δ: mean of p+' - p-'
  ``contrast_auc``, ``contrast_brier``: AUC and Brier score of the normalised confidences of
                both checkpoints, pooled (2N points, N correct)
  ``contrast_ece``: SmoothECE of the *earlier* checkpoint's normalised confidences only
                (§A.3 footnote 3: pooling both would hide miscalibration; the value does not
                depend on which checkpoint is used, since both q and y sum to 1 per question and
                SmoothECE is symmetric under (f, y) -> (1-f, 1-y); the authors' latex.py uses
                the earlier one)
full set
  ``full_auc``, ``full_brier``: pooled over all evaluation checkpoints
  ``full_ece``: SmoothECE per checkpoint, then the mean (§A.3: no pooling)

p+ / p- are the raw confidences of the checkpoint that is correct / incorrect on the question;
p+' / p-' their normalised values (Eq. 1 or the fitted §B.1 map). Δ0 is computed from raw
confidences (Eq. 1 preserves the order; a fitted map could create float ties), as in the
authors' code. An *improvement* question is one the later checkpoint gets right, a
*regression* one the earlier checkpoint gets right. A pair is used only if its contrast set
has at least ``min_contrast`` questions (500 TriviaQA/Jeopardy, 300 BioASQ). If one class of
a pair is empty, its balanced means fall back to the plain mean (the authors' code does the
same); if no pair is retained the seven contrast metrics are NaN.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Callable, Sequence, Union

import numpy as np

from ..classification import auc, brier
from ..smooth_ece import smooth_ece

CONTRAST_METRICS = ("delta0_b", "delta0", "delta_b", "delta",
                    "contrast_auc", "contrast_brier", "contrast_ece")
FULL_METRICS = ("full_auc", "full_brier", "full_ece")
METRICS = CONTRAST_METRICS + FULL_METRICS
HIGHER_IS_BETTER = {"delta0_b": True, "delta0": True, "delta_b": True, "delta": True,
                    "contrast_auc": True, "contrast_brier": False, "contrast_ece": False,
                    "full_auc": True, "full_brier": False, "full_ece": False}
#: what an estimator no better than chance scores on a metric that has such a value: 0 for a
#: Δ (p+ on the correct answer no higher than p- on the incorrect one, on average), 0.5 for an AUC
CHANCE = {"delta0_b": 0.0, "delta0": 0.0, "delta_b": 0.0, "delta": 0.0, "contrast_auc": 0.5, "full_auc": 0.5}

PairNormaliser = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
Normaliser = Union[str, "Normalisation", PairNormaliser]


def authors_clamp(p, eps: float) -> np.ndarray:
    """Confidences as the persistent authors condition them (conset/evaluation.py,
    `condition_pair_confidences`: ``confs.float().clamp(1e-6, 1 - 1e-6)``): cast to float32,
    then clipped to [eps, 1 - eps] with both bounds in float32 (1 - 1e-6 is 0.99999899...)."""
    lo, hi = np.float32(eps), np.float32(1) - np.float32(eps)
    return np.clip(np.asarray(p, dtype=np.float32), lo, hi)


def eq1_normalise(p1, p2, clamp: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 1: condition two checkpoints' confidences on exactly one being correct.

    p1' = p1 (1 - p2) / Z, p2' = p2 (1 - p1) / Z, Z = p1 (1 - p2) + p2 (1 - p1).
    ``clamp=None``: the exact formula in float64; Z = 0 only when p1 = p2 = 0 or p1 = p2 = 1,
    both answers are then equally supported and we return 0.5 / 0.5 (the limit along p1 = p2).
    ``clamp=eps``: as the authors compute it (config `persistent.confidence_clamp`):
    `authors_clamp`, then the formula in float32 arithmetic; it differs from the exact one by
    ~1e-6 except where a confidence is exactly 0 or 1 (0 vs 0.3: exactly 0 / 1 here,
    1e-6-scale there, which moves the AUC of tied answers).
    """
    a = np.asarray(p1, dtype=float)
    b = np.asarray(p2, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"p1 and p2 must have one shape, got {a.shape} and {b.shape}")
    for name, p in (("p1", a), ("p2", b)):
        if not np.all((p >= 0) & (p <= 1)):
            bad = int(np.flatnonzero(~((p >= 0) & (p <= 1)))[0])
            raise ValueError(f"{name} must lie in [0, 1]; entry {bad} is {p.ravel()[bad]!r}")
    if clamp is not None:
        a, b = authors_clamp(a, clamp), authors_clamp(b, clamp)
        num1, num2 = a * (1 - b), (1 - a) * b
        z = num1 + num2
        return (num1 / z).astype(float), (num2 / z).astype(float)
    num1 = a * (1 - b)
    num2 = b * (1 - a)
    z = num1 + num2
    safe = np.where(z > 0, z, 1.0)
    q1 = np.where(z > 0, num1 / safe, 0.5)
    q2 = np.where(z > 0, num2 / safe, 0.5)
    return q1, q2


@dataclass(frozen=True)
class ContrastPair:
    """The contrast set of evaluation checkpoints ``early`` < ``late`` (row indices).

    ``items``: item indices where exactly one of the two is correct (ascending);
    ``improvement``: per item, True when the later checkpoint is the correct one."""

    early: int
    late: int
    items: np.ndarray
    improvement: np.ndarray

    @property
    def size(self) -> int:
        return int(self.items.size)

    @property
    def n_improvement(self) -> int:
        return int(self.improvement.sum())

    @property
    def n_regression(self) -> int:
        return self.size - self.n_improvement


def _check_correct(correct) -> np.ndarray:
    y = np.asarray(correct, dtype=float)
    if y.ndim != 2:
        raise ValueError(f"correctness must be (n_checkpoints, n_items), got shape {y.shape}")
    bad = ~((y == 0) | (y == 1))
    if bad.any():
        k, i = np.argwhere(bad)[0]
        raise ValueError(f"correctness must be 0/1; checkpoint row {k}, item {i} is {y[k, i]!r}")
    return y


def contrast_pairs(correct, min_size: int = 1,
                   pairs: Sequence[tuple[int, int]] | None = None) -> list[ContrastPair]:
    """Contrast sets for the checkpoint pairs (k, k'), k < k' (default: every such pair of
    rows of ``correct``), keeping those with at least ``min_size`` questions (§A.3)."""
    y = _check_correct(correct)
    n_ckpt = y.shape[0]
    if pairs is None:
        pairs = list(combinations(range(n_ckpt), 2))
    out = []
    for k, k2 in pairs:
        if not 0 <= k < k2 < n_ckpt:
            raise ValueError(f"checkpoint pair ({k}, {k2}) must satisfy 0 <= k < k' < {n_ckpt}")
        items = np.flatnonzero(y[k] != y[k2])
        if items.size >= min_size and items.size > 0:
            out.append(ContrastPair(k, k2, items, y[k2, items] == 1))
    return out


@dataclass(frozen=True)
class Normalisation:
    """How contrast-set confidences are normalised: ``kind`` "eq1" (Eq. 1) or "bt" (the
    fitted §B.1 map, ``bt_max_iter`` L-BFGS-B iterations); ``clamp`` None (exact, float64) or
    the authors' eps (`authors_clamp` before either, float32 results, as theirs). The strings
    "eq1" / "bt" stand for the exact forms at the default iterations."""

    kind: str = "eq1"
    clamp: float | None = None
    bt_max_iter: int | None = None

    def __post_init__(self):
        if self.kind not in ("eq1", "bt"):
            raise ValueError(f"normaliser must be 'eq1', 'bt' or a callable, got {self.kind!r}")
        if self.clamp is not None and not 0 < self.clamp < 0.5:
            raise ValueError(f"the confidence clamp must lie in (0, 0.5), got {self.clamp!r}")

    def __call__(self, p1, p2, y1) -> tuple[np.ndarray, np.ndarray]:
        if self.kind == "eq1":
            return eq1_normalise(p1, p2, self.clamp)
        from .bt_normalise import MAX_ITER, fit_bt_normaliser

        if self.clamp is not None:
            p1 = authors_clamp(p1, self.clamp).astype(float)
            p2 = authors_clamp(p2, self.clamp).astype(float)
        # §B.1: one map per confidence estimator and contrast set, fitted on its labels.
        q1, q2 = fit_bt_normaliser(p1, p2, y1, max_iter=self.bt_max_iter or MAX_ITER)(p1, p2)
        if self.clamp is not None:
            q1, q2 = q1.astype(np.float32).astype(float), q2.astype(np.float32).astype(float)
        return q1, q2


def _resolve_normaliser(normaliser: Normaliser):
    """-> function (p_early, p_late, y_early) -> (q_early, q_late)."""
    if isinstance(normaliser, Normalisation):
        return normaliser
    if callable(normaliser):
        return lambda p1, p2, y1: normaliser(p1, p2)
    return Normalisation(normaliser)


@dataclass(frozen=True)
class PairData:
    """Per-question quantities of one contrast pair for one confidence array."""

    q_early: np.ndarray  # normalised confidence of the earlier checkpoint
    q_late: np.ndarray
    y_early: np.ndarray  # 1 when the earlier checkpoint is correct (regression question)
    gap: np.ndarray  # p+' - p-' (normalised)
    sign: np.ndarray  # sign(p+ - p-) on raw confidences, ties 0
    improvement: np.ndarray


def pair_data(conf: np.ndarray, pair: ContrastPair, normaliser: Normaliser = "eq1") -> PairData:
    """Normalised confidences, Δ and Δ0 summands of one contrast pair; ``conf`` is
    (n_ckpt, n_items) for one seed."""
    p1 = conf[pair.early, pair.items]
    p2 = conf[pair.late, pair.items]
    y1 = (~pair.improvement).astype(float)
    q1, q2 = _resolve_normaliser(normaliser)(p1, p2, y1)
    q1 = np.asarray(q1, dtype=float)
    q2 = np.asarray(q2, dtype=float)
    gap = np.where(y1 == 1, q1 - q2, q2 - q1)
    sign = np.sign(np.where(y1 == 1, p1 - p2, p2 - p1))
    return PairData(q1, q2, y1, gap, sign, pair.improvement)


def class_balanced_mean(values: np.ndarray, improvement: np.ndarray) -> float:
    """(mean over improvement questions + mean over regression questions) / 2; the plain
    mean when one class is empty."""
    imp = np.asarray(improvement, dtype=bool)
    if imp.all() or not imp.any():
        return float(np.mean(values))
    return float((np.mean(values[imp]) + np.mean(values[~imp])) / 2)


def delta_metrics(p_plus, p_minus, improvement, raw_plus=None, raw_minus=None) -> dict[str, float]:
    """Δ, Δ0, Δb, Δ0b (§2) of one contrast set: ``p_plus``/``p_minus`` the (normalised)
    confidences on the correct/incorrect answer, ``improvement`` the class of each question.
    Δ0 uses ``raw_plus``/``raw_minus`` when given (else the same confidences)."""
    pp = np.asarray(p_plus, dtype=float)
    pm = np.asarray(p_minus, dtype=float)
    rp = pp if raw_plus is None else np.asarray(raw_plus, dtype=float)
    rm = pm if raw_minus is None else np.asarray(raw_minus, dtype=float)
    imp = np.asarray(improvement, dtype=bool)
    if not (pp.shape == pm.shape == rp.shape == rm.shape == imp.shape) or pp.ndim != 1 or pp.size == 0:
        raise ValueError("delta_metrics needs non-empty 1-D arrays of one length")
    gap = pp - pm
    sign = np.sign(rp - rm)
    return {"delta0_b": class_balanced_mean(sign, imp), "delta0": float(np.mean(sign)),
            "delta_b": class_balanced_mean(gap, imp), "delta": float(np.mean(gap))}


def _pair_metrics(d: PairData) -> dict[str, float]:
    q = np.concatenate([d.q_early, d.q_late])
    y = np.concatenate([d.y_early, 1 - d.y_early])
    return {"delta0_b": class_balanced_mean(d.sign, d.improvement),
            "delta0": float(np.mean(d.sign)),
            "delta_b": class_balanced_mean(d.gap, d.improvement),
            "delta": float(np.mean(d.gap)),
            "contrast_auc": auc(q, y), "contrast_brier": brier(q, y),
            "contrast_ece": smooth_ece(d.q_early, d.y_early)}


def _check_conf(conf, shape: tuple[int, int]) -> np.ndarray:
    c = np.asarray(conf, dtype=float)
    if c.ndim == 2:
        c = c[None]
    if c.ndim != 3 or c.shape[1:] != shape:
        raise ValueError(f"confidence must be (n_checkpoints, n_items) = {shape} or "
                         f"(n_seeds, n_checkpoints, n_items), got {np.shape(conf)}")
    bad = ~((c >= 0) & (c <= 1))
    if bad.any():
        s, k, i = np.argwhere(bad)[0]
        raise ValueError(f"confidence must lie in [0, 1]; seed {s}, checkpoint row {k}, item {i} is {c[s, k, i]!r}")
    return c


def persistent_metrics(conf, correct, pairs: Sequence[ContrastPair] | None = None, *,
                       min_contrast: int = 1, normaliser: Normaliser = "eq1") -> dict[str, float]:
    """The ten metrics of Tables 11-13 for one (method, model, dataset); see the module doc.

    ``conf``: (n_ckpt, n_items) or (n_seeds, n_ckpt, n_items); ``correct``: (n_ckpt, n_items).
    ``pairs``: contrast pairs (default: every k < k' with at least ``min_contrast`` questions).
    ``normaliser``: "eq1" (Eq. 1), "bt" (§B.1, fitted per pair and seed on its labels), a
    `Normalisation` (either, with the authors' clamp and BT iterations) or a callable
    (p_early, p_late) -> (q_early, q_late).
    """
    y = _check_correct(correct)
    c = _check_conf(conf, y.shape)
    if pairs is None:
        pairs = contrast_pairs(y, min_size=min_contrast)
    per_seed = []
    for conf_s in c:
        m = {"full_auc": auc(conf_s.ravel(), y.ravel()),
             "full_brier": brier(conf_s.ravel(), y.ravel()),
             "full_ece": float(np.mean([smooth_ece(conf_s[k], y[k]) for k in range(y.shape[0])]))}
        if pairs:
            rows = [_pair_metrics(pair_data(conf_s, p, normaliser)) for p in pairs]
            m.update({name: float(np.mean([r[name] for r in rows])) for name in CONTRAST_METRICS})
        else:
            m.update({name: float("nan") for name in CONTRAST_METRICS})
        per_seed.append(m)
    return {name: float(np.mean([m[name] for m in per_seed])) for name in METRICS}


def pivot_long(checkpoint, item, values, checkpoint_order: Sequence | None = None):
    """Long columns (checkpoint, item, value) -> ((n_ckpt, n_items) array, checkpoints, items).

    Rows follow ``checkpoint_order`` (default: sorted labels); items are sorted. Every
    (checkpoint, item) cell must occur exactly once."""
    ck = np.asarray(checkpoint)
    it = np.asarray(item)
    v = np.asarray(values, dtype=float)
    if not (ck.shape == it.shape == v.shape) or ck.ndim != 1:
        raise ValueError("checkpoint, item and value columns must be 1-D of one length")
    labels = np.unique(ck) if checkpoint_order is None else np.asarray(list(checkpoint_order))
    lookup = {lab: r for r, lab in enumerate(labels.tolist())}
    unknown = set(np.unique(ck).tolist()) - set(lookup)
    if unknown:
        raise ValueError(f"checkpoints {sorted(map(str, unknown))} are not in checkpoint_order")
    rows = np.array([lookup[x] for x in ck.tolist()], dtype=int)
    items, cols = np.unique(it, return_inverse=True)
    flat = rows * items.size + cols
    counts = np.bincount(flat, minlength=labels.size * items.size)
    if counts.max() > 1:
        r, cidx = divmod(int(np.argmax(counts)), items.size)
        raise ValueError(f"duplicate row for checkpoint {labels[r]!r}, item {items[cidx]!r}")
    if counts.min() == 0:
        r, cidx = divmod(int(np.argmin(counts)), items.size)
        raise ValueError(f"missing row for checkpoint {labels[r]!r}, item {items[cidx]!r}")
    out = np.empty(labels.size * items.size)
    out[flat] = v
    return out.reshape(labels.size, items.size), labels, items
