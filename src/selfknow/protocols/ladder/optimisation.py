"""Table 18 (paper §E.1): the clean-label GLAD-style and Dawid-Skene estimators at their fixed
EM budget and optimised.

Both are maximum a posteriori fits (`estimators.ds_em`, `estimators.glad_em`), over the
labelled turns t of a stream with domain d, persona state s and label y:

  DS    Σ_t log Σ_z π_d(z) E_s(y | z)                    + Σ_d log π_d (1 − π_d)
  GLAD  Σ_t log Σ_z π_d(z) P(y | z, s, d)                 + Σ_d log π_d (1 − π_d)
        − ½ Σ_s (α_s − α0_s)² − ½ Σ_d β_d²,    P(y = z) = σ(α_s e^{β_d})

(the Beta(2, 2) terms are the +1 smoothing of the prevalences, the Gaussians GLAD's priors).
The tables stop EM at a fixed budget (`estimators.DS_BUDGET`, `GLAD_BUDGET`). `optimise`
maximises the objective with L-BFGS-B (analytic gradients) from the fixed-budget fit and from
`restarts` seeded random starts and keeps the best, so it never ends below the fixed-budget
fit. With `glad_priors` False the optimised GLAD-style fit drops its Gaussian priors (they hold
the fitted reliabilities near their starting values) and maximises its likelihood with the
prevalence smoothing only, as Dawid-Skene's. Table 18 scores both on clean labels (the true
outcome on every turn).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit, logit

from selfknow.records import read_parquet, write_parquet

from . import controls as C
from .estimators import (DS_BUDGET, GLAD_ALPHA0, GLAD_BUDGET, PREVALENCE_SMOOTHING, Stream,
                         ds_em, glad_em, prevalence_profile)
from .metrics import profile_metrics

#: the latent estimators Table 18 optimises
OPTIMISED = ("GLAD", "Dawid-Skene")
SETTINGS = ("fixed budget", "optimised")
#: bounds of the probabilities' logits (the EM's 1e-10 probability floor is logit -23), of
#: GLAD's log inverse difficulties (e^10 already makes every label certain) and abilities
LOGIT_MAX = 23.0
BETA_MAX = 10.0
ALPHA_MAX = 50.0


@dataclass(frozen=True)
class Optimisation:
    """How the optimised fit searches (config `ladder.optimisation`): L-BFGS-B iterations and
    tolerance, the number of seeded random starts besides the fixed-budget fit, and whether
    the optimised GLAD-style fit keeps its Gaussian priors on abilities and difficulties (the
    objective EM climbs) or maximises its likelihood with the prevalence smoothing only."""

    restarts: int
    max_iter: int
    tol: float
    glad_priors: bool


def _log(m: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(m, 1e-300))


def _prevalence_terms(pi: np.ndarray):
    """Value and gradient (in the logits u) of the Beta smoothing term Σ log π (1 − π)."""
    k = PREVALENCE_SMOOTHING
    return k * float((np.log(pi) + np.log1p(-pi)).sum()), k * (1.0 - 2.0 * pi)


def glad_objective(x: np.ndarray, g: np.ndarray, st: np.ndarray, y: np.ndarray, n_dom: int,
                   priors: bool = True):
    """GLAD's MAP objective (module docstring; without the Gaussian terms when not `priors`)
    and its gradient at x = [α_0, α_1, β_1..β_D, logit π_1..logit π_D]; g, st, y: each
    label's domain group, state and 0/1 label. Returns (objective, gradient, log-likelihood)."""
    alpha, beta, u = x[:2], x[2:2 + n_dom], x[2 + n_dom:]
    pi = expit(u)
    eb = np.exp(beta[g])
    s = alpha[st] * eb
    a = expit(s)
    sgn = np.where(y == 1, 1.0, -1.0)
    l1 = np.where(y == 1, a, 1.0 - a)
    p = pi[g]
    m = p * l1 + (1.0 - p) * (1.0 - l1)
    ll = float(_log(m).sum())
    prior, prior_grad = _prevalence_terms(pi)
    w = 1.0 if priors else 0.0
    val = ll + prior - w * 0.5 * float(((alpha - GLAD_ALPHA0) ** 2).sum() + (beta ** 2).sum())
    ds = (2.0 * p - 1.0) * sgn / m * a * (1.0 - a)
    ga = np.bincount(st, weights=ds * eb, minlength=2) - w * (alpha - GLAD_ALPHA0)
    gb = np.bincount(g, weights=ds * s, minlength=n_dom) - w * beta
    gu = np.bincount(g, weights=(2.0 * l1 - 1.0) / m, minlength=n_dom) * pi * (1.0 - pi) + prior_grad
    return val, np.concatenate([ga, gb, gu]), ll


def ds_objective(x: np.ndarray, g: np.ndarray, st: np.ndarray, y: np.ndarray, n_dom: int):
    """Dawid-Skene's MAP objective and gradient at x = [logit π_1..logit π_D, logit TPR_0,
    logit FPR_0, logit TPR_1, logit FPR_1] (TPR_s = E_s(1 | 1), FPR_s = E_s(1 | 0)).
    Returns (objective, gradient, log-likelihood)."""
    u, v = x[:n_dom], x[n_dom:].reshape(2, 2)
    pi, tpr, fpr = expit(u), expit(v[:, 0]), expit(v[:, 1])
    t, f = tpr[st], fpr[st]
    sgn = np.where(y == 1, 1.0, -1.0)
    l1 = np.where(y == 1, t, 1.0 - t)
    l0 = np.where(y == 1, f, 1.0 - f)
    p = pi[g]
    m = p * l1 + (1.0 - p) * l0
    ll = float(_log(m).sum())
    prior, prior_grad = _prevalence_terms(pi)
    gu = np.bincount(g, weights=(l1 - l0) / m, minlength=n_dom) * pi * (1.0 - pi) + prior_grad
    gt = np.bincount(st, weights=p * sgn / m * t * (1.0 - t), minlength=2)
    gf = np.bincount(st, weights=(1.0 - p) * sgn / m * f * (1.0 - f), minlength=2)
    return ll + prior, np.concatenate([gu, np.column_stack([gt, gf]).ravel()]), ll


OBJECTIVES = {"GLAD": glad_objective, "Dawid-Skene": ds_objective}


def _clip_logit(p) -> np.ndarray:
    return np.clip(logit(np.clip(np.asarray(p, float), 1e-15, 1 - 1e-15)), -LOGIT_MAX, LOGIT_MAX)


def _bounds(kind: str, n_dom: int) -> list[tuple[float, float]]:
    lg = [(-LOGIT_MAX, LOGIT_MAX)]
    if kind == "GLAD":
        return [(-ALPHA_MAX, ALPHA_MAX)] * 2 + [(-BETA_MAX, BETA_MAX)] * n_dom + lg * n_dom
    return lg * (n_dom + 4)


def _em_start(kind: str, g, st, y):
    """The fixed-budget EM fit: (domain codes with labels, x, EM iterations, stopped on its
    tolerance)."""
    if kind == "GLAD":
        used, res = glad_em(g, st, y)
        budget = GLAD_BUDGET
        x = np.concatenate([np.clip(res.alphas, -ALPHA_MAX, ALPHA_MAX),
                            np.clip(res.betas, -BETA_MAX, BETA_MAX), _clip_logit(res.priors[:, 1])])
    else:
        used, res = ds_em(g, st, y)
        budget = DS_BUDGET
        # errors[w, observed, true]: TPR = E(1 | 1), FPR = E(1 | 0)
        x = np.concatenate([_clip_logit(res.priors[:, 1]),
                            _clip_logit(np.column_stack([res.errors[:, 1, 1], res.errors[:, 1, 0]]).ravel())])
    return used, x, int(res.n_iter), bool(res.n_iter < budget.max_iter)


def _random_start(kind: str, n_dom: int, rng: np.random.Generator) -> np.ndarray:
    """A start in the better-than-chance region (label switching would otherwise mirror it):
    prevalences U(0.05, 0.95); GLAD abilities U(0, 3), log inverse difficulties N(0, 1); DS
    TPR U(0.5, 0.99), FPR U(0.01, 0.5)."""
    u = _clip_logit(rng.uniform(0.05, 0.95, n_dom))
    if kind == "GLAD":
        return np.concatenate([rng.uniform(0.0, 3.0, 2), rng.normal(0.0, 1.0, n_dom), u])
    rates = np.column_stack([rng.uniform(0.5, 0.99, 2), rng.uniform(0.01, 0.5, 2)]).ravel()
    return np.concatenate([u, _clip_logit(rates)])


def _prevalences(kind: str, x: np.ndarray, n_used: int) -> np.ndarray:
    u = x[2 + n_used:] if kind == "GLAD" else x[:n_used]
    p = expit(u)
    return np.column_stack([1.0 - p, p])


def optimise(kind: str, dom_codes, states, labels, n_dom: int, settings: Optimisation,
             rng: np.random.Generator) -> dict:
    """The fixed-budget EM fit of `kind` ("GLAD" or "Dawid-Skene") and its optimisation
    (module docstring) on one label stream (every array one entry per labelled turn; domain
    codes < n_dom). Returns, for "fixed budget" and "optimised", the profile (n_dom,), the
    optimised objective and the log-likelihood per label, the iterations and whether the
    search stopped on its tolerance."""
    if kind not in OBJECTIVES:
        raise ValueError(f"optimise: unknown estimator {kind!r}; expected one of {sorted(OBJECTIVES)}")
    st = np.asarray(states, np.int64)
    y = np.asarray(labels, np.int64)
    if y.size == 0:
        raise ValueError(f"optimise {kind}: the stream has no labels")
    used, x0, em_iter, em_conv = _em_start(kind, np.asarray(dom_codes, np.int64), st, y)
    _, g = np.unique(np.asarray(dom_codes, np.int64), return_inverse=True)
    n_used, n = used.size, max(y.size, 1)
    fn = OBJECTIVES[kind]
    kw = {"priors": settings.glad_priors} if kind == "GLAD" else {}

    def neg(x):
        val, grad, _ = fn(x, g, st, y, n_used, **kw)
        return -val, -grad

    bounds = _bounds(kind, n_used)
    starts = [x0] + [_random_start(kind, n_used, rng) for _ in range(settings.restarts)]
    best = None
    for x in starts:
        r = minimize(neg, x, jac=True, method="L-BFGS-B", bounds=bounds,
                     options={"maxiter": settings.max_iter, "ftol": settings.tol, "gtol": settings.tol})
        if best is None or r.fun < best.fun:
            best = r
    out = {}
    for setting, x, it, conv in (("fixed budget", x0, em_iter, em_conv),
                                 ("optimised", best.x, int(best.nit), bool(best.success))):
        val, _, ll = fn(x, g, st, y, n_used, **kw)
        out[setting] = {"profile": prevalence_profile(used, _prevalences(kind, x, n_used), n_dom),
                        "objective": val / n, "loglik": ll / n, "n_iter": it, "converged": conv}
    return out


def optimisation_scores(turns: pd.DataFrame, settings: Optimisation, seed: int,
                        estimators: Sequence[str] = OPTIMISED) -> pd.DataFrame:
    """Per session of `turns` on clean labels: profile metrics, log-likelihood per label,
    iterations and convergence of each estimator at its fixed budget and optimised.
    Each session draws its random starts from its own stream seeded with (seed, session)."""
    clean = C.label_condition(turns, "clean")
    rows = []
    for k, (model, sid, g) in enumerate(C._session_groups(clean)):
        s = Stream.from_frame(g)
        names, codes = s.codes()
        rng = np.random.default_rng([seed, k])
        for est in estimators:
            fits = optimise(est, codes, s.in_expertise.astype(np.int64), s.label.astype(np.int64),
                            names.size, settings, rng)
            for setting in SETTINGS:
                f = fits[setting]
                rows.append({"model": model, "session_id": sid, "estimator": est, "setting": setting,
                             **profile_metrics(dict(zip(names, f["profile"])), s.domain, s.correct),
                             "loglik": f["loglik"],
                             "n_iter": float(f["n_iter"]), "converged": float(f["converged"])})
    return pd.DataFrame(rows)


def optimisation_job(turns_path: str, out_path: str, *, seed: int, restarts: int, max_iter: int,
                     tol: float, glad_priors: bool, sessions: int) -> dict:
    """Table 18's part of one model: `optimisation_scores` on its recorded sessions (the first
    `sessions`, 0 = all), written to `out_path`."""
    from .jobs import _first_sessions

    turns = read_parquet(turns_path)
    if turns.empty:
        raise ValueError(f"{turns_path}: no session turns")
    turns["session_id"] = turns["session_id"].astype(str)
    if sessions:
        turns = _first_sessions(turns, sessions)
    out = optimisation_scores(turns, Optimisation(restarts, max_iter, tol, glad_priors), seed)
    write_parquet(out, out_path)
    mean = out.groupby(["estimator", "setting"])["CBF"].mean()
    return {"model": str(turns["model"].iloc[0]), "sessions": int(turns["session_id"].nunique()),
            **{f"CBF_{e}_{s.replace(' ', '_')}": round(float(v), 3) for (e, s), v in mean.items()}}
