"""Latent Confidence Alignment Error and cost efficiency (lcae paper, §III Stage 3; SPEC §3).

LCAE_i = −(1/Q) Σ_q [e_iq log ĉ_iq + (1 − e_iq) log(1 − ĉ_iq)]: the binary cross-entropy of
the model's self-assessed error probability ĉ (LLM_ModelErrorP) against the latent error
probability e (IRT_ModelErrorP = 1 − σ(θ_i − b_q)). ĉ is clipped to [ε, 1 − ε] before the
logs; ε = 1e-6 by default (so one fully confident miss costs at most −log ε ≈ 13.8 nats).
The paper does not state its ε; the value is a parameter. Items where ĉ is missing (NaN:
no parsable self-assessment) are left out of that examinee's mean.

Named variant ``kind="squared"``: mean of (e − ĉ)² (a Brier-type distance; no clipping).

Cost efficiency (CE) is tokens per USD. The paper's simplified form averages the input and
output prices per million tokens: CE = 10^6 / ((P_in + P_out) / 2). The usage-weighted
variant divides the tokens a run actually used by what they cost at those prices.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

DEFAULT_EPS = 1e-6


def lcae(e, c_hat, eps: float = DEFAULT_EPS, kind: Literal["bce", "squared"] = "bce") -> np.ndarray:
    """LCAE per examinee (rows) over items (columns); 1-D inputs are one examinee and give a
    0-d array. `e` and `c_hat` are probabilities in [0, 1] of one shape; NaN in either skips
    the cell. An examinee with no usable item gets NaN."""
    E = np.asarray(e, dtype=float)
    C = np.asarray(c_hat, dtype=float)
    if E.shape != C.shape:
        raise ValueError(f"e has shape {E.shape} but c_hat has shape {C.shape}")
    if not 0.0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5), got {eps}")
    for name, A in (("e", E), ("c_hat", C)):
        bad = ~np.isnan(A) & ((A < 0) | (A > 1))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}{list(idx)} = {A[idx]!r} is not a probability in [0, 1]")
    use = ~(np.isnan(E) | np.isnan(C))
    if kind == "bce":
        Cc = np.clip(np.where(use, C, 0.5), eps, 1.0 - eps)
        Ez = np.where(use, E, 0.0)
        loss = -(Ez * np.log(Cc) + (1.0 - Ez) * np.log1p(-Cc))
    elif kind == "squared":
        loss = (np.where(use, E, 0.0) - np.where(use, C, 0.0)) ** 2
    else:
        raise ValueError(f"kind must be 'bce' or 'squared', got {kind!r}")
    loss = np.where(use, loss, 0.0)
    n = use.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, loss.sum(axis=-1) / n, np.nan)


def cost_efficiency(price_in: float, price_out: float) -> float:
    """CE in tokens per USD from prices in USD per million tokens:
    10^6 / ((P_in + P_out) / 2) (lcae paper, §III Stage 3). $0.039 / $0.19 → 8.73e6."""
    mean_price = (float(price_in) + float(price_out)) / 2.0
    if not mean_price > 0:
        raise ValueError(f"prices must give a positive mean, got in={price_in}, out={price_out}")
    return 1e6 / mean_price


def run_cost_usd(tokens_in, tokens_out, price_in: float, price_out: float) -> np.ndarray:
    """USD spent on recorded token counts at prices per million tokens."""
    return (np.asarray(tokens_in, dtype=float) * price_in
            + np.asarray(tokens_out, dtype=float) * price_out) / 1e6


def cost_efficiency_from_usage(tokens_in, tokens_out, price_in: float, price_out: float) -> float:
    """Usage-weighted CE: total recorded tokens (in + out) per USD they cost. Equals
    :func:`cost_efficiency` when input and output token counts are equal."""
    t_in = float(np.sum(tokens_in))
    t_out = float(np.sum(tokens_out))
    cost = float(run_cost_usd(t_in, t_out, price_in, price_out))
    if not cost > 0:
        raise ValueError("recorded tokens cost nothing at these prices; CE is undefined")
    return (t_in + t_out) / cost
