"""LADDER metrics (SPEC §2 "Metrics"; paper §3, §B.1, §D.2-§D.4).

Profile level (one session or a pooled fit): CBF, normalised CBF, signed bias, centred shape
error, Kendall τ, all over *eligible* domains (at least 2 scored answers, paper §4.1).
Answer level: accuracy, ECE (10 equal-width bins), Brier, AUROC, hallucination rate,
normalised hallucination rate, confidence gap.

Where the authors' released scorer (yin1245/selfbound, compute_session_metrics and the
compute_* helpers in capbound_baselines_v4.py / classic_baselines_v4.py, commit fc3573a)
differs from the shared definitions in `selfknow.stats.classification`, the faithful variant
lives here and is used to reproduce the released aggregates:
  - ECE: bins [e_i, e_{i+1}) with edges `np.linspace(0, 1, 11)`; a confidence of exactly 1
    falls in no bin but still counts in the denominator. This differs from
    `classification.binned_ece` (⌊10c⌋ bins, 1 in the last bin) at the float edges
    (0.7 < linspace[7] = 0.7000000000000001 lands in bin 6) and at c = 1.
    SPEC's variant (1 in the last bin) is `ece(..., include_one=True)`.
  - AUROC: 0.5 when the session has one class only (classification.auc returns NaN).
  - HR: share of *wrong* answers among answers with confidence > 0.7 (strict), 0 when
    there is none; the normalised HR of SPEC / paper §D.3 (share of errors that carry high
    confidence) is `normalised_hallucination_rate`.
  - Per-session values are rounded (ECE, Brier, HR to 4 decimals, AUROC and CBF to 3) before
    the session mean: `AUTHOR_ROUNDING`.
"""
from __future__ import annotations

import numpy as np
from selfknow.stats.classification import auc, brier

HR_THRESHOLD = 0.7
MIN_DOMAIN_ANSWERS = 2
AUTHOR_ROUNDING = {"ECE": 4, "Brier": 4, "AUROC": 3, "HR": 4, "CBF": 3}


# --- answer level --------------------------------------------------------------------------

def ece(conf, correct, n_bins: int = 10, include_one: bool = False) -> float:
    """Binned ECE, Σ_b |B_b|/N · |acc(B_b) − conf(B_b)|, bins [e_i, e_{i+1}) on
    `np.linspace(0, 1, n_bins + 1)` (the authors' compute_ece). `include_one=True` puts a
    confidence of 1 in the last bin (SPEC §2). 0.0 for no answers, as the authors."""
    c = np.asarray(conf, float)
    y = np.asarray(correct, float)
    if c.size == 0:
        return 0.0
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.searchsorted(edges, c, side="right") - 1  # e_i <= c < e_{i+1}
    if include_one:
        idx = np.where(c >= 1.0, n_bins - 1, idx)
    ok = (idx >= 0) & (idx < n_bins)
    cnt = np.bincount(idx[ok], minlength=n_bins)
    cs = np.bincount(idx[ok], weights=c[ok], minlength=n_bins)
    ys = np.bincount(idx[ok], weights=y[ok], minlength=n_bins)
    return float(np.abs(cs - ys).sum() / c.size)


def auroc(conf, correct) -> float:
    """AUROC of confidence for correctness; 0.5 when one class is absent (authors)."""
    y = np.asarray(correct, float)
    if y.size == 0 or y.min() == y.max():
        return 0.5
    return auc(conf, correct)


def hallucination_rate(conf, correct, threshold: float = HR_THRESHOLD) -> float:
    """Share of wrong answers among answers with confidence > threshold; 0 if none (authors)."""
    c = np.asarray(conf, float)
    y = np.asarray(correct, bool)
    hi = c > threshold
    return float((~y[hi]).mean()) if hi.any() else 0.0


def normalised_hallucination_rate(conf, correct, threshold: float = HR_THRESHOLD) -> float:
    """Share of errors given high confidence (> threshold) (SPEC §2, paper §D.3); NaN
    without errors."""
    c = np.asarray(conf, float)
    y = np.asarray(correct, bool)
    return float((c[~y] > threshold).mean()) if (~y).any() else float("nan")


def confidence_gap(conf, correct) -> float:
    """Mean confidence on correct answers minus on incorrect ones; NaN if a class is absent."""
    c = np.asarray(conf, float)
    y = np.asarray(correct, bool)
    if not y.any() or y.all():
        return float("nan")
    return float(c[y].mean() - c[~y].mean())


def answer_metrics(conf, correct, threshold: float = HR_THRESHOLD) -> dict[str, float]:
    """All answer-level metrics of one set of (confidence, outcome) pairs."""
    y = np.asarray(correct, bool)
    return {
        "accuracy": float(y.mean()) if y.size else float("nan"),
        "ECE": ece(conf, correct),
        "Brier": brier(conf, correct) if y.size else 0.0,
        "AUROC": auroc(conf, correct),
        "HR": hallucination_rate(conf, correct, threshold),
        "norm_HR": normalised_hallucination_rate(conf, correct, threshold),
        "conf_gap": confidence_gap(conf, correct),
    }


# --- profile level -------------------------------------------------------------------------

def domain_accuracy(domains, correct, min_count: int = MIN_DOMAIN_ANSWERS) -> dict[str, tuple[float, int]]:
    """Empirical accuracy a_d and count n_d of every domain with at least `min_count` answers."""
    d = np.asarray(domains).astype(str)
    y = np.asarray(correct, float)
    names, inv = np.unique(d, return_inverse=True)
    n = np.bincount(inv, minlength=names.size)
    k = np.bincount(inv, weights=y, minlength=names.size)
    return {str(nm): (float(k[i] / n[i]), int(n[i])) for i, nm in enumerate(names) if n[i] >= min_count}


def _pairs(profile: dict[str, float], target: dict[str, tuple[float, int]]):
    doms = sorted(target)
    p = np.array([profile.get(d, 0.5) for d in doms], float)
    a = np.array([target[d][0] for d in doms], float)
    return p, a


def cbf(p_hat, acc) -> float:
    """CBF = 1 − mean_d |p̂_d − a_d| (paper Eq. 1); 0.0 with no eligible domain (authors)."""
    p, a = np.asarray(p_hat, float), np.asarray(acc, float)
    return float(1.0 - np.abs(p - a).mean()) if p.size else 0.0


def normalised_cbf(cbf_value, cbf_l0) -> float:
    """(CBF − CBF_L0)/(1 − CBF_L0): L0 (NoMemory) is 0, exact L3 counting is 1 (§3, §D.2)."""
    den = 1.0 - cbf_l0
    return float((cbf_value - cbf_l0) / den) if den > 0 else float("nan")


def signed_bias(p_hat, acc) -> float:
    """b = mean_d (p̂_d − a_d); positive = overestimation."""
    p, a = np.asarray(p_hat, float), np.asarray(acc, float)
    return float((p - a).mean()) if p.size else float("nan")


def shape_error(p_hat, acc) -> float:
    """Centred shape error mean_d |(p̂_d − mean p̂) − (a_d − mean a)|."""
    p, a = np.asarray(p_hat, float), np.asarray(acc, float)
    if not p.size:
        return float("nan")
    return float(np.abs((p - p.mean()) - (a - a.mean())).mean())


def kendall_tau(p_hat, acc) -> float:
    """Kendall's τ-b between p̂ and a (ties corrected, as scipy.stats.kendalltau); NaN when
    either is constant (undefined, §D.4). O(n²) pair signs: n is at most ~20 domains."""
    p, a = np.asarray(p_hat, float), np.asarray(acc, float)
    if p.size < 2 or np.ptp(p) == 0 or np.ptp(a) == 0:
        return float("nan")
    iu = np.triu_indices(p.size, 1)
    sp = np.sign(p[:, None] - p[None, :])[iu]
    sa = np.sign(a[:, None] - a[None, :])[iu]
    den = np.sqrt(float((sp != 0).sum()) * float((sa != 0).sum()))
    return float((sp * sa).sum() / den)


def profile_metrics(profile: dict[str, float], domains, correct) -> dict[str, float]:
    """Profile-level metrics of `profile` against the empirical accuracies of the eligible
    domains of (domains, correct). `CBF_L0` is the constant-0.5 profile's CBF."""
    target = domain_accuracy(domains, correct)
    p, a = _pairs(profile, target)
    c, c0 = cbf(p, a), cbf(np.full(a.size, 0.5), a)
    return {
        "CBF": c,
        "CBF_L0": c0,
        "norm_CBF": normalised_cbf(c, c0),
        "bias": signed_bias(p, a),
        "shape_error": shape_error(p, a),
        "kendall_tau": kendall_tau(p, a),
        "n_domains": float(a.size),
    }


def round_like_authors(row: dict[str, float]) -> dict[str, float]:
    """Round ECE/Brier/HR to 4 and AUROC/CBF to 3 decimals, as the authors' per-session scorer."""
    out = dict(row)
    for k, nd in AUTHOR_ROUNDING.items():
        if k in out and out[k] is not None and np.isfinite(out[k]):
            out[k] = round(float(out[k]), nd)
    return out
