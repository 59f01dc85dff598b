"""LADDER domain-profile estimators (SPEC §2 "The five levels"; paper §3, §C.1, §C.2, §G.1).

Each estimator reads one label stream (a session, or a model's pooled records) and returns
  - `profile`: the end-of-stream estimate p̂(d) for every domain in the stream, and
  - `query_confidence`: the confidence it would attach to each turn's answer *before* that
    turn's feedback is seen (the answer-level metrics ECE / Brier / AUROC / HR score these).

Turn order is the stream order. Labels: `label` is the strict decoded label (1 / 0 / NaN),
`label_uncertain_as_negative` the map the authors' UF-PDC uses (see feedback_rules/frozen.yaml).

The definitions of the released baselines (NoMemory, OraclePDC, UF-PDC, Platt-Online,
HistBin-Online, Bayes-Domain, EM-Joint) follow the authors' published implementation
(yin1245/selfbound, code/baselines/capbound_baselines_v4.py and classic_baselines_v4.py,
commit fc3573a), read as a specification; each function says which rule it encodes.
Global, Count, Dawid-Skene and GLAD-style follow the paper text (§3, §E.1) and SPEC §2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from selfknow.stats.dawid_skene import dawid_skene
from selfknow.stats.glad import glad

CLIP = 1e-3  # the authors clip Platt / HistBin / EM-Joint confidences to [1e-3, 1 - 1e-3]


@dataclass
class Stream:
    """One ordered label stream."""

    domain: np.ndarray          # str per turn
    confidence: np.ndarray      # float in [0, 1]
    correct: np.ndarray         # bool (used only by OraclePDC)
    label: np.ndarray           # float 1 / 0 / NaN, strict decoded labels
    label_uf: np.ndarray        # float 1 / 0 / NaN, uncertain replies as negative
    in_expertise: np.ndarray    # bool

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> "Stream":
        """From turn records that carry `label_strict` and `label_uncertain_as_negative`
        (or `decoded_label`, used for both when the rule set has no second map)."""
        strict = df["label_strict"] if "label_strict" in df else df["decoded_label"]
        uf = df["label_uncertain_as_negative"] if "label_uncertain_as_negative" in df else strict
        return cls(
            domain=df["domain"].astype(str).to_numpy(),
            confidence=df["confidence"].astype(float).to_numpy(),
            correct=df["correct"].astype(bool).to_numpy(),
            label=strict.astype(float).to_numpy(),
            label_uf=uf.astype(float).to_numpy(),
            in_expertise=df["in_expertise"].astype(bool).to_numpy(),
        )

    def __len__(self) -> int:
        return self.domain.size

    def take(self, idx: np.ndarray) -> "Stream":
        """The sub-stream of turns `idx`, in that order (used by the cluster bootstrap)."""
        return Stream(self.domain[idx], self.confidence[idx], self.correct[idx],
                      self.label[idx], self.label_uf[idx], self.in_expertise[idx])

    def codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Domain names in order of first appearance, and each turn's code."""
        names, first, inv = np.unique(self.domain, return_index=True, return_inverse=True)
        order = np.argsort(first)
        remap = np.empty_like(order)
        remap[order] = np.arange(order.size)
        return names[order], remap[inv]


@dataclass
class EstimatorOutput:
    profile: dict[str, float]
    query_confidence: np.ndarray


def _prior_counts(codes: np.ndarray, n_dom: int, values: np.ndarray, mask: np.ndarray):
    """For each turn, the (sum of values, count) over earlier turns of its own domain where
    mask holds: exclusive running sums, vectorised with a turn x domain cumsum."""
    onehot = (codes[:, None] == np.arange(n_dom)[None, :]) & mask[:, None]
    s = np.cumsum(onehot * np.nan_to_num(values)[:, None], axis=0)
    n = np.cumsum(onehot, axis=0)
    idx = np.arange(codes.size)
    own_s = s[idx, codes] - np.where(mask, np.nan_to_num(values), 0.0)
    own_n = n[idx, codes] - mask.astype(int)
    return own_s, own_n, s[-1] if codes.size else np.zeros(n_dom), n[-1] if codes.size else np.zeros(n_dom)


def _profile(names, values) -> dict[str, float]:
    return {str(d): float(v) for d, v in zip(names, values)}


# --- L0 / L3 -------------------------------------------------------------------------------

def no_memory(s: Stream) -> EstimatorOutput:
    """L0: profile 0.5 everywhere; query confidence = the model's own confidence
    (authors' NoMemoryBaseline)."""
    names, _ = s.codes()
    return EstimatorOutput(_profile(names, np.full(names.size, 0.5)), s.confidence.copy())


def oracle_pdc(s: Stream) -> EstimatorOutput:
    """L3: verified correct/total per domain. Query confidence = running accuracy of earlier
    turns in the domain, the model's confidence on a domain's first turn (authors' OraclePDC):
    the counting of UF-PDC with every turn labelled by its correctness."""
    return _count(s, s.correct.astype(float))


# --- L2 counting estimators ----------------------------------------------------------------

def _count(s: Stream, lab: np.ndarray) -> EstimatorOutput:
    """Per-domain fraction positive of the labels `lab` (NaN: no label), 0.5 for a domain
    without one; query confidence the running fraction, the model's confidence before it."""
    names, c = s.codes()
    has = ~np.isnan(lab)
    ps, pn, ts, tn = _prior_counts(c, names.size, lab, has)
    q = np.where(pn > 0, ps / np.maximum(pn, 1), s.confidence)
    return EstimatorOutput(_profile(names, np.where(tn > 0, ts / np.maximum(tn, 1), 0.5)), q)


def uf_pdc(s: Stream) -> EstimatorOutput:
    """UF-PDC as released: per-domain fraction positive over positive + negative + *uncertain*
    replies (uncertain counted negative); 0.5 for a domain without labels. Query confidence:
    running fraction in the domain, the model's confidence before the domain's first label
    (authors' UserFeedbackPDC)."""
    return _count(s, s.label_uf)


def count(s: Stream) -> EstimatorOutput:
    """Count (paper §3): per-domain fraction positive over strict labels (ambiguous replies
    missing); otherwise as UF-PDC."""
    return _count(s, s.label)


def global_mean(s: Stream) -> EstimatorOutput:
    """Global (paper §4.2): one Beta(1, 1) posterior mean over all strict labels,
    (positives + 1)/(labels + 2), used for every domain. The smoothing is inferred: the
    paper's GPT-5.5 session Global CBF 0.800 is reproduced by it on the released sessions
    (0.7999) and not by the raw mean (0.851). Query confidence: the same mean over the
    labels before the turn."""
    names, _ = s.codes()
    has = ~np.isnan(s.label)
    v = np.nan_to_num(s.label) * has
    cs, cn = np.cumsum(v) - v, np.cumsum(has) - has
    q = (cs + 1.0) / (cn + 2.0)
    g = (v.sum() + 1.0) / (has.sum() + 2.0)
    return EstimatorOutput(_profile(names, np.full(names.size, g)), q)


def bayes_domain(s: Stream, a0: float = 1.0, b0: float = 1.0) -> EstimatorOutput:
    """Beta / Bayes-Domain: Beta(1, 1) prior per domain, +1 to α on a positive and to β on a
    negative strict label; profile and query confidence = posterior mean α/(α+β)
    (authors' BayesDomain)."""
    names, c = s.codes()
    has = ~np.isnan(s.label)
    ps, pn, ts, tn = _prior_counts(c, names.size, s.label, has)
    q = (a0 + ps) / (a0 + b0 + pn)
    return EstimatorOutput(_profile(names, (a0 + ts) / (a0 + b0 + tn)), q)


def platt_online(s: Stream, lr: float = 0.1, l2: float = 1e-3) -> EstimatorOutput:
    """Platt-Online: query confidence σ(w·c + b) clipped to [1e-3, 1-1e-3], starting at
    w = 1, b = 0; after each strict label one SGD step on log-loss with L2 on w
    (w -= lr·((p − y)·c + l2·w), b -= lr·(p − y)). Profile: per-domain fraction positive
    over strict labels, 0.5 without labels (authors' PlattOnline)."""
    w, b = 1.0, 0.0
    q = np.empty(len(s))
    for i in range(len(s)):
        c = float(s.confidence[i])
        z = w * c + b
        p = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
        q[i] = min(max(p, CLIP), 1 - CLIP)
        y = s.label[i]
        if not np.isnan(y):
            g = p - y
            w, b = w - lr * (g * c + l2 * w), b - lr * g
    return EstimatorOutput(count(s).profile, q)


def histbin_online(s: Stream, n_bins: int = 10) -> EstimatorOutput:
    """HistBin-Online: 10 equal-width bins of the model's confidence (bin = ⌊min(c, 1−1e-9)·10⌋);
    query confidence = mean strict label of earlier labelled turns in the same bin, the
    model's own confidence if the bin is empty, clipped to [1e-3, 1-1e-3]. Profile as
    Platt-Online (authors' HistBinOnline)."""
    c = np.clip(s.confidence, 0.0, 1.0 - 1e-9)
    bins = np.clip((c * n_bins).astype(int), 0, n_bins - 1)
    has = ~np.isnan(s.label)
    ps, pn, _, _ = _prior_counts(bins, n_bins, s.label, has)
    q = np.clip(np.where(pn >= 1, ps / np.maximum(pn, 1), s.confidence), CLIP, 1 - CLIP)
    return EstimatorOutput(count(s).profile, q)


# --- L2 latent-reliability estimators ------------------------------------------------------

def _posterior_correct(p, r, y):
    like1 = np.where(y == 1, r, 1 - r)
    like0 = np.where(y == 1, 1 - r, r)
    return like1 * p / (like1 * p + like0 * (1 - p) + 1e-12)


def em_joint(s: Stream, r_in: float = 0.7, r_out: float = 0.5, iters: int = 30,
             tol: float = 1e-4) -> EstimatorOutput:
    """EM-Joint (paper §C.2, §G.1; authors' EMJoint). Model: latent correctness z with prior
    p(d); a strict label agrees with z with symmetric reliability r_in / r_out by the turn's
    expertise state.
    Online (query confidence): p(d) starts at 0.5; after each label, with r fixed at its
    initial value, add the posterior P(z=1 | y) to a weighted count and set
    p(d) = (Σ posterior + 1)/(n + 2); query = clip(p(d)).
    End of stream: batch EM from the online p(d) and initial r, up to 30 iterations, M-step
    p(d) = (Σ post + 1)/(n_d + 2), r_s = (Σ agreement + 1)/(n_s + 2), stop when no parameter
    moves by 1e-4. Profile = clip(p(d)); 0.5 for domains without labels."""
    names, c = s.codes()
    D = names.size
    has = ~np.isnan(s.label)
    exp_in = s.in_expertise
    p = np.full(D, 0.5)
    wc, wn = np.zeros(D), np.zeros(D)
    q = np.empty(len(s))
    for i in range(len(s)):
        d = c[i]
        q[i] = min(max(p[d], CLIP), 1 - CLIP)
        if has[i]:
            r = r_in if exp_in[i] else r_out
            wc[d] += float(_posterior_correct(p[d], r, s.label[i]))
            wn[d] += 1.0
            p[d] = (wc[d] + 1.0) / (wn[d] + 2.0)
    if has.any():
        bd, by, bin_ = c[has], s.label[has], exp_in[has]
        labelled = np.unique(bd)
        ri, ro = r_in, r_out
        n_d = np.bincount(bd, minlength=D)
        n_in, n_out = int(bin_.sum()), int((~bin_).sum())
        for _ in range(iters):
            r = np.where(bin_, ri, ro)
            post = _posterior_correct(p[bd], r, by)
            p_new = p.copy()
            p_new[labelled] = ((np.bincount(bd, weights=post, minlength=D) + 1.0) / (n_d + 2.0))[labelled]
            hit = np.where(by == 1, post, 1 - post)
            ri_new = (hit[bin_].sum() + 1.0) / (n_in + 2.0) if n_in > 0 else ri
            ro_new = (hit[~bin_].sum() + 1.0) / (n_out + 2.0) if n_out > 0 else ro
            delta = max(np.abs(p_new[labelled] - p[labelled]).max(), abs(ri_new - ri), abs(ro_new - ro))
            p, ri, ro = p_new, ri_new, ro_new
            if delta < tol:
                break
    return EstimatorOutput(_profile(names, np.clip(p, CLIP, 1 - CLIP)), q)


# Initial reliabilities of the second-order estimators (paper §A5 of the released tex:
# "initial p̂ = 0.5, r_in = 0.75, r_out = 0.55").
R_IN0, R_OUT0 = 0.75, 0.55


@dataclass(frozen=True)
class LatentBudget:
    """The EM budget of the latent-reliability fits: EM iterations and stopping tolerance
    (GLAD also bounds its conjugate-gradient M-step)."""

    max_iter: int
    tol: float
    m_step_max_iter: int = 25
    m_step_tol: float = 1e-3


#: the fixed budgets every table uses (Table 18 compares them with optimised fits)
DS_BUDGET = LatentBudget(max_iter=200, tol=1e-8)
GLAD_BUDGET = LatentBudget(max_iter=100, tol=1e-6, m_step_max_iter=25, m_step_tol=1e-3)
#: GLAD's initial abilities and their Gaussian prior means: logit of R_OUT0 / R_IN0 (state 0 /
#: 1 = out of / in expertise)
GLAD_ALPHA0 = np.log(np.array([R_OUT0, R_IN0]) / (1 - np.array([R_OUT0, R_IN0])))
#: the +1 (Beta(2, 2) prior) smoothing of the latent fits' domain prevalences, as EM-Joint's
PREVALENCE_SMOOTHING = 1.0


def ds_em(dom_codes, states, labels):
    """Dawid-Skene with per-domain prevalence and per-state 2x2 confusion matrices, by EM from
    p = 0.5 and symmetric r_in / r_out within DS_BUDGET. Returns (the codes of the domains with labels, in the
    order of the result's prior groups; the fit)."""
    used, g = np.unique(dom_codes, return_inverse=True)
    err0 = np.empty((2, 2, 2))
    for st, r in ((0, R_OUT0), (1, R_IN0)):
        err0[st] = [[r, 1 - r], [1 - r, r]]  # [observed, true]
    res = dawid_skene(np.arange(labels.size), states, labels, 2, n_workers=2, prior_groups=g,
                      init_priors=np.array([0.5, 0.5]), init_errors=err0,
                      prior_smoothing=PREVALENCE_SMOOTHING, error_smoothing=0.0,
                      max_iter=DS_BUDGET.max_iter, tol=DS_BUDGET.tol)
    return used, res


def glad_em(dom_codes, states, labels):
    """GLAD-style: state abilities α_s, per-domain difficulty β_d and prevalence, by EM from
    α = GLAD_ALPHA0, β = 0, p = 0.5 within GLAD_BUDGET. Returns (domain codes with labels, the
    fit)."""
    used, g = np.unique(dom_codes, return_inverse=True)
    res = glad(np.arange(labels.size), states, labels, 2, n_workers=2,
               difficulty_groups=g, prior_groups=g, learn_priors=True, prior_smoothing=PREVALENCE_SMOOTHING,
               init_alpha=GLAD_ALPHA0, init_beta=0.0, alpha_prior_mean=GLAD_ALPHA0, beta_prior_mean=0.0,
               max_iter=GLAD_BUDGET.max_iter, tol=GLAD_BUDGET.tol,
               m_step_max_iter=GLAD_BUDGET.m_step_max_iter, m_step_tol=GLAD_BUDGET.m_step_tol)
    return used, res


def prevalence_profile(used, priors, n_dom: int) -> np.ndarray:
    """Clipped P(correct) of each domain with labels (rows of `priors`), 0.5 elsewhere."""
    out = np.full(n_dom, 0.5)
    out[used] = np.clip(np.asarray(priors)[:, 1], CLIP, 1 - CLIP)
    return out


def _latent(s: Stream, em, query: bool = True) -> EstimatorOutput:
    """The domain profile of the latent fit `em` (`ds_em`, `glad_em`) on the strict labels,
    and with `query` each turn's confidence from the fit on the labels before it."""
    names, c = s.codes()
    D = names.size
    has = ~np.isnan(s.label)
    st = s.in_expertise.astype(np.int64)
    y = np.nan_to_num(s.label).astype(np.int64)

    def fit(dom_codes, states, labels, n_dom):
        used, res = em(dom_codes, states, labels)
        return prevalence_profile(used, res.priors, n_dom)

    q = np.full(len(s), np.nan)
    cur = np.full(D, 0.5)
    for i in range(len(s) if query else 0):
        q[i] = cur[c[i]]
        if has[i]:  # refit only when the label set grows
            m = has.copy()
            m[i + 1:] = False
            cur = fit(c[m], st[m], y[m], D)
    prof = fit(c[has], st[has], y[has], D) if has.any() else np.full(D, 0.5)
    return EstimatorOutput(_profile(names, prof), q)


def dawid_skene_domain(s: Stream, query: bool = True) -> EstimatorOutput:
    """Dawid-Skene (paper §3, §E.1; SPEC §2): latent correctness with per-domain prevalence
    p(d) and one 2x2 confusion matrix per persona expertise state (in / out), EM from
    p = 0.5, symmetric r_in = 0.75, r_out = 0.55; Beta(1, 1) smoothing (+1/+2) on the
    prevalences as in EM-Joint and Bayes-Domain, maximum-likelihood confusion matrices
    (Dawid & Skene 1979; smoothing them towards 0.5 would bias clean-label fits, see
    tests/test_ladder_estimators.py). Profile = clip(p(d)), 0.5 for domains without labels. Query confidence:
    the profile refitted on the labels before the turn."""
    return _latent(s, ds_em, query)


def glad_domain(s: Stream, query: bool = True) -> EstimatorOutput:
    """GLAD-style (paper §3, §E.1; SPEC §2 "annotator ability x item difficulty"): a label
    agrees with the latent correctness with probability σ(α_state · exp(β_domain)); state
    abilities start at logit(0.75) / logit(0.55) with Gaussian priors there, domain
    difficulties at 0 with N(0, 1) priors; per-domain prevalence p(d) learned with +1
    smoothing. Profile and query confidence as for Dawid-Skene.
    `query=False` skips the per-turn refits (query confidences NaN)."""
    return _latent(s, glad_em, query)


ESTIMATORS: dict[str, Callable[[Stream], EstimatorOutput]] = {
    "NoMemory": no_memory,
    "Global": global_mean,
    "Count": count,
    "UF-PDC": uf_pdc,
    "Bayes-Domain": bayes_domain,
    "Platt-Online": platt_online,
    "HistBin-Online": histbin_online,
    "Dawid-Skene": dawid_skene_domain,
    "GLAD": glad_domain,
    "EM-Joint": em_joint,
    "OraclePDC": oracle_pdc,
}
ALIASES = {"Beta": "Bayes-Domain", "DS": "Dawid-Skene", "DS-asym": "Dawid-Skene",
           "GLAD-style": "GLAD", "NoMem": "NoMemory", "Oracle": "OraclePDC"}
# Baselines in the authors' released aggregates that need no live model call.
RELEASED_OFFLINE = ["NoMemory", "OraclePDC", "UF-PDC", "Platt-Online", "HistBin-Online",
                    "Bayes-Domain", "EM-Joint"]


def resolve(name: str) -> str:
    n = ALIASES.get(name, name)
    if n not in ESTIMATORS:
        raise KeyError(f"unknown LADDER estimator {name!r}; known: {sorted(ESTIMATORS) + sorted(ALIASES)}")
    return n


def fit_estimator(name: str, stream: Stream, query: bool = True) -> EstimatorOutput:
    """Run one estimator (by name or alias) on a stream. `query=False` lets the refit-heavy
    latent estimators (Dawid-Skene, GLAD) skip per-turn query confidences (left NaN)."""
    n = resolve(name)
    if not query and n in ("Dawid-Skene", "GLAD"):
        return ESTIMATORS[n](stream, query=False)
    return ESTIMATORS[n](stream)
