"""Dawid-Skene label aggregation by EM (Dawid & Skene 1979), pure numpy.

Each label is a triple (task, worker, observed class). Latent true class z_t of a task has
prior pi[g(t)] (one prior vector per *prior group*; a single group is the classic model);
worker w reports class k given true class c with probability E[w, k, c].

  E-step  q_t(c) ∝ pi[g(t), c] · Π_{labels of t} E[w, k, c]
  M-step  pi[g, c] ∝ α_pi + Σ_{t in g} q_t(c);   E[w, k, c] ∝ α_E + Σ_{labels (t,w,k)} q_t(c)

With α = 0 (default) the updates, the majority-vote initialisation, the 1e-10 floor on
probabilities and the stopping rule (increase of the evidence lower bound per label below
`tol`) are those of crowd-kit's `DawidSkene`, which the tests agree with. LADDER (SPEC §2)
uses per-domain prior groups, persona states as workers and Laplace smoothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EPS = 1e-10


@dataclass
class DawidSkeneResult:
    posteriors: np.ndarray   # (n_tasks, K): q_t(c)
    priors: np.ndarray       # (n_groups, K)
    errors: np.ndarray       # (n_workers, K observed, K true)
    n_iter: int
    elbo: list[float]


def _codes(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or (a.size and (a.min() < 0 or not np.issubdtype(a.dtype, np.integer))):
        raise ValueError(f"{name} must be 1-D non-negative integer codes")
    return a.astype(np.int64)


def majority_vote_posteriors(tasks, labels, n_tasks: int, n_classes: int) -> np.ndarray:
    """Share of each task's labels that name each class (tasks without labels: uniform)."""
    counts = np.zeros((n_tasks, n_classes))
    np.add.at(counts, (tasks, labels), 1.0)
    tot = counts.sum(1, keepdims=True)
    return np.where(tot > 0, counts / np.maximum(tot, 1), 1.0 / n_classes)


def _m_step(q, tasks, workers, labels, groups, n_groups, n_workers, K, a_pi, a_e):
    pri = np.full((n_groups, K), a_pi, dtype=float)
    np.add.at(pri, groups, q)
    pri = np.clip(pri, _EPS, None)
    pri /= pri.sum(1, keepdims=True)
    err = np.full((n_workers, K, K), a_e, dtype=float)
    np.add.at(err, (workers, labels), q[tasks])
    err = np.clip(err, _EPS, None)
    err /= err.sum(1, keepdims=True)
    return pri, err


def _e_step(pri, err, tasks, workers, labels, groups, n_tasks):
    loglik = np.log(pri[groups]).copy()
    np.add.at(loglik, tasks, np.log(err[workers, labels]))
    loglik -= loglik.max(1, keepdims=True)
    q = np.exp(loglik)
    return q / q.sum(1, keepdims=True)


def _elbo(q, pri, err, tasks, workers, labels, groups) -> float:
    # crowd-kit's bound: the prior term is counted once per label, not once per task.
    per_label = np.log(err[workers, labels]) + np.log(pri[groups[tasks]])
    joint = float((q[tasks] * per_label).sum())
    qc = np.clip(q, _EPS, None)
    entropy = -float((np.log(qc) * qc).sum())
    return joint + entropy


def dawid_skene(
    tasks, workers, labels, n_classes: int | None = None, *,
    n_tasks: int | None = None, n_workers: int | None = None, prior_groups=None,
    init_posteriors: np.ndarray | None = None,
    init_priors: np.ndarray | None = None, init_errors: np.ndarray | None = None,
    prior_smoothing: float = 0.0, error_smoothing: float = 0.0,
    max_iter: int = 100, tol: float = 1e-5,
) -> DawidSkeneResult:
    """Fit Dawid-Skene by EM.

    tasks, workers, labels: integer codes, one entry per label (observed class in 0..K-1).
    prior_groups: a group code per task (length n_tasks); default one group.
    Initialisation: `init_priors` + `init_errors` (start with an E-step), else
    `init_posteriors`, else majority vote (crowd-kit's choice), followed by an M-step.
    """
    t, w, y = _codes(tasks, "tasks"), _codes(workers, "workers"), _codes(labels, "labels")
    if not (t.size == w.size == y.size):
        raise ValueError("tasks, workers and labels must have one length")
    K = int(n_classes if n_classes is not None else (y.max() + 1 if y.size else 2))
    nT = int(n_tasks if n_tasks is not None else (t.max() + 1 if t.size else 0))
    nW = int(n_workers if n_workers is not None else (w.max() + 1 if w.size else 0))
    g = np.zeros(nT, dtype=np.int64) if prior_groups is None else _codes(prior_groups, "prior_groups")
    if g.size != nT:
        raise ValueError(f"prior_groups has {g.size} entries for {nT} tasks")
    nG = int(g.max() + 1) if g.size else 1
    if y.size and y.max() >= K:
        raise ValueError(f"label code {y.max()} >= n_classes {K}")

    if init_priors is not None and init_errors is not None:
        pri = np.broadcast_to(np.asarray(init_priors, float), (nG, K)).copy()
        err = np.asarray(init_errors, float).copy()
        if err.shape != (nW, K, K):
            raise ValueError(f"init_errors must have shape {(nW, K, K)}, got {err.shape}")
        q = _e_step(pri, err, t, w, y, g, nT)
    else:
        q = (np.asarray(init_posteriors, float) if init_posteriors is not None
             else majority_vote_posteriors(t, y, nT, K))
    pri, err = _m_step(q, t, w, y, g, nG, nW, K, prior_smoothing, error_smoothing)
    history: list[float] = []
    last = -np.inf
    it = 0
    for it in range(1, max_iter + 1):
        q = _e_step(pri, err, t, w, y, g, nT)
        pri, err = _m_step(q, t, w, y, g, nG, nW, K, prior_smoothing, error_smoothing)
        cur = _elbo(q, pri, err, t, w, y, g) / max(t.size, 1)
        history.append(cur)
        if cur - last < tol:
            break
        last = cur
    return DawidSkeneResult(q, pri, err, it, history)
