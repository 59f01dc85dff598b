"""GLAD label aggregation (Whitehill et al. 2009) by EM; numpy with a scipy M-step.

Worker w with ability α_w labels a task of difficulty group h(t) with inverse difficulty
exp(β_h); it reports the true class with probability a = σ(α_w · exp(β_h)) and each other
class with probability (1 − a)/(K − 1). True class prior pi[g(t)] per prior group.

  E-step  q_t(c) ∝ pi[g(t), c] · Π_labels [a if k = c else (1 − a)/(K − 1)]
  M-step  maximise Q(α, β) = Σ_labels [q_t(k) log a + (1 − q_t(k)) (log(1 − a) − log(K − 1))]
                             − ½ Σ_w (α_w − μ_α)² − ½ Σ_h (β_h − μ_β)²
          (Gaussian priors of unit variance), by conjugate gradients from the current point;
          optionally pi[g] ∝ α_pi + Σ_{t in g} q_t.

With one difficulty group per task, fixed uniform priors, μ = 1, initial α = β = 1 and the
defaults below (CG, 25 iterations, tol 1e-2; stop when the per-row Q gains less than `tol`),
this is crowd-kit's `GLAD`, which the tests agree with. LADDER's GLAD-style estimator
(SPEC §2) groups difficulty and priors by domain and uses persona states as workers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from .dawid_skene import _codes


@dataclass
class GladResult:
    posteriors: np.ndarray  # (n_tasks, K)
    alphas: np.ndarray      # (n_workers,)
    betas: np.ndarray       # (n_difficulty_groups,) on the log scale: inverse difficulty exp(β)
    priors: np.ndarray      # (n_prior_groups, K)
    n_iter: int
    q_history: list[float]


def _checked(tasks, workers, labels, n_classes, n_tasks, n_workers, difficulty_groups, prior_groups):
    """`glad`'s codes (tasks, workers, labels, difficulty and prior groups) checked, and the
    numbers of classes, tasks and workers."""
    t, w, y = _codes(tasks, "tasks"), _codes(workers, "workers"), _codes(labels, "labels")
    if not (t.size == w.size == y.size):
        raise ValueError("tasks, workers and labels must have one length")
    K = int(n_classes if n_classes is not None else y.max() + 1)
    if K < 2:
        raise ValueError("GLAD needs at least two classes")
    nT = int(n_tasks if n_tasks is not None else t.max() + 1)
    nW = int(n_workers if n_workers is not None else w.max() + 1)
    h = np.arange(nT) if difficulty_groups is None else _codes(difficulty_groups, "difficulty_groups")
    g = np.zeros(nT, dtype=np.int64) if prior_groups is None else _codes(prior_groups, "prior_groups")
    if h.size != nT or g.size != nT:
        raise ValueError("difficulty_groups and prior_groups need one entry per task")
    return t, w, y, h, g, (K, nT, nW)


def glad(
    tasks, workers, labels, n_classes: int | None = None, *,
    n_tasks: int | None = None, n_workers: int | None = None,
    difficulty_groups=None, prior_groups=None,
    priors: np.ndarray | None = None, learn_priors: bool = False, prior_smoothing: float = 0.0,
    init_alpha=1.0, init_beta=1.0, alpha_prior_mean=1.0, beta_prior_mean=1.0,
    max_iter: int = 100, tol: float = 1e-5,
    m_step_max_iter: int = 25, m_step_tol: float = 1e-2,
) -> GladResult:
    """Fit GLAD by EM. Codes as in `dawid_skene`; `difficulty_groups` maps each task to a
    difficulty parameter (default: one per task, Whitehill's model)."""
    t, w, y, h, g, (K, nT, nW) = _checked(tasks, workers, labels, n_classes, n_tasks, n_workers,
                                          difficulty_groups, prior_groups)
    nH, nG = int(h.max() + 1), int(g.max() + 1)
    pri = (np.full((nG, K), 1.0 / K) if priors is None
           else np.broadcast_to(np.asarray(priors, float), (nG, K)).copy())
    alpha = np.broadcast_to(np.asarray(init_alpha, float), (nW,)).copy()
    beta = np.broadcast_to(np.asarray(init_beta, float), (nH,)).copy()
    mu_a = np.broadcast_to(np.asarray(alpha_prior_mean, float), (nW,))
    mu_b = np.broadcast_to(np.asarray(beta_prior_mean, float), (nH,))
    hl = h[t]
    log_km1 = np.log(K - 1)
    n_rows = t.size * K  # crowd-kit normalises Q by its (label x class) row count

    def e_step(alpha, beta, pri):
        s = alpha[w] * np.exp(beta[hl])
        ls, l1s = log_expit(s), log_expit(-s) - log_km1
        ll = np.log(np.clip(pri[g], 1e-300, None)).copy()
        contrib = np.repeat(l1s[:, None], K, axis=1)
        contrib[np.arange(t.size), y] = ls
        np.add.at(ll, t, contrib)
        ll -= ll.max(1, keepdims=True)
        q = np.exp(ll)
        return q / q.sum(1, keepdims=True)

    def q_value(x, qy):
        a, b = x[:nW], x[nW:]
        s = a[w] * np.exp(b[hl])
        val = (qy * log_expit(s) + (1 - qy) * (log_expit(-s) - log_km1)).sum()
        # Gaussian log-densities including their constants, as crowd-kit's Q does.
        val += (-0.5 * (a - mu_a) ** 2).sum() + (-0.5 * (b - mu_b) ** 2).sum()
        val -= 0.5 * np.log(2 * np.pi) * (nW + nH)
        return float(val)

    def neg_q_and_grad(x, qy):
        a, b = x[:nW], x[nW:]
        eb = np.exp(b[hl])
        s = a[w] * eb
        r = qy - expit(s)  # dQ/ds
        ga = np.bincount(w, weights=r * eb, minlength=nW) - (a - mu_a)
        gb = np.bincount(hl, weights=r * s, minlength=nH) - (b - mu_b)
        return -q_value(x, qy), -np.concatenate([ga, gb])

    q = e_step(alpha, beta, pri)
    Q = q_value(np.concatenate([alpha, beta]), q[t, y])  # un-normalised on entry, as crowd-kit
    history: list[float] = []
    it = 0
    for it in range(1, max_iter + 1):
        last = Q
        q = e_step(alpha, beta, pri)
        qy = q[t, y]
        res = minimize(neg_q_and_grad, np.concatenate([alpha, beta]), args=(qy,), jac=True,
                       method="CG", tol=m_step_tol, options={"maxiter": m_step_max_iter})
        alpha, beta = res.x[:nW].copy(), res.x[nW:].copy()
        if learn_priors:
            pri = np.full((nG, K), prior_smoothing, dtype=float)
            np.add.at(pri, g, q)
            pri = np.clip(pri, 1e-10, None)
            pri /= pri.sum(1, keepdims=True)
        Q = q_value(res.x, qy) / n_rows
        history.append(Q)
        if Q - last < tol:
            break
    return GladResult(q, alpha, beta, pri, it, history)
