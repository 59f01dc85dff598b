"""Cross-seed variance of adapter hidden states (persistent §B.7, Table 19).

For checkpoint k, seeds s and question q, the adapter f_{k,s} runs on checkpoint k's model
with k's own answer to q; h_{k,s,q,l} is the hidden state of the last prompt token at layer l
(the position whose next-token distribution gives the confidence). The total variance of
{h_{k,s,q,l}}_s is the trace of its covariance matrix (sum over dimensions of the sample
variance across seeds, ddof = 1). For each (q, l) the Spearman correlation ρ_{q,l} between the
checkpoint index k and that total variance is computed; Table 19 reports, per layer, the mean
and median of ρ_{q,l} over questions. Questions whose variance is constant over checkpoints
have an undefined ρ and are left out of the mean and median (counted in `n_undefined`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


def total_variance(hidden: np.ndarray) -> np.ndarray:
    """(n_seeds, ..., d) hidden states -> (...) trace of the across-seed covariance."""
    h = np.asarray(hidden, dtype=np.float64)
    if h.ndim < 2 or h.shape[0] < 2:
        raise ValueError(f"need (n_seeds >= 2, ..., d) hidden states, got shape {h.shape}")
    return h.var(axis=0, ddof=1).sum(axis=-1)


def _rank(x: np.ndarray, axis: int) -> np.ndarray:
    """Average ranks (ties share their mean rank) along `axis`, as scipy.stats.rankdata."""
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    order = np.argsort(x, axis=-1, kind="stable")
    ranks = np.empty_like(x)
    n = x.shape[-1]
    np.put_along_axis(ranks, order, np.arange(1, n + 1, dtype=float), axis=-1)
    srt = np.take_along_axis(x, order, axis=-1)
    # average tied ranks: for each run of equal sorted values, replace by the run's mean
    out = ranks.copy()
    flat_s = srt.reshape(-1, n)
    flat_o = order.reshape(-1, n)
    flat_r = out.reshape(-1, n)
    for r in np.flatnonzero((np.diff(flat_s, axis=1) == 0).any(axis=1)):
        vals, start, counts = np.unique(flat_s[r], return_index=True, return_counts=True)
        for s0, c in zip(start, counts):
            if c > 1:
                flat_r[r, flat_o[r, s0:s0 + c]] = s0 + (c + 1) / 2
    return np.moveaxis(flat_r.reshape(x.shape), -1, axis)


def spearman_with_index(values: np.ndarray) -> np.ndarray:
    """Spearman ρ between the index 0..K-1 along axis 0 and `values` (K, ...) -> (...);
    NaN where the values are constant along axis 0."""
    v = np.asarray(values, dtype=float)
    k = v.shape[0]
    if k < 2:
        raise ValueError("need at least two checkpoints")
    rv = _rank(v, axis=0)
    ri = np.arange(1, k + 1, dtype=float).reshape((k,) + (1,) * (v.ndim - 1))
    rv_c = rv - rv.mean(axis=0)
    ri_c = ri - ri.mean()
    den = np.sqrt((rv_c ** 2).sum(axis=0) * (ri_c ** 2).sum())
    num = (rv_c * ri_c).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def variance_correlation_table(hidden_by_seed: Sequence[np.ndarray]) -> pd.DataFrame:
    """Table 19 from hidden states: `hidden_by_seed[s]` is (n_ckpt, n_layers, n_q, d) for one
    seed (checkpoints in training order, layers from the first transformer block).
    Returns layer (1-based), mean_rho, median_rho, n_questions, n_undefined."""
    h = np.stack([np.asarray(x) for x in hidden_by_seed])  # (S, K, L, Q, d)
    if h.ndim != 5:
        raise ValueError(f"each seed's hidden states must be (n_ckpt, n_layers, n_q, d), got {h.shape[1:]}")
    tv = total_variance(h)  # (K, L, Q)
    rho = spearman_with_index(tv)  # (L, Q)
    rows = []
    for layer, r in enumerate(rho, start=1):
        ok = r[np.isfinite(r)]
        rows.append({"layer": layer,
                     "mean_rho": float(ok.mean()) if ok.size else float("nan"),
                     "median_rho": float(np.median(ok)) if ok.size else float("nan"),
                     "n_questions": int(r.size), "n_undefined": int(r.size - ok.size)})
    return pd.DataFrame(rows)


def adapter_hidden_states(model_dir: str, adapter_dir: str, questions: Sequence[str],
                          answers: Sequence[str], *, batch_size: int = 32, device: str = "cpu",
                          dtype: str = "float32") -> np.ndarray:
    """(n_layers, n, d) hidden states of the last prompt token of the adapter's confidence
    prompt (its saved read-out) after every transformer block, with the adapter on
    `model_dir` (the embeddings, which LoRA does not touch, are left out)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .verbalized import load_readout

    readout = load_readout(adapter_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    from selfknow.models.registry import track_base

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    track_base(base)
    base.to(device)
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    prompts = [readout.prompt(q, "" if a is None else str(a)) for q, a in zip(questions, answers)]
    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            enc = [tok(p, add_special_tokens=True)["input_ids"] for p in prompts[i:i + batch_size]]
            lengths = torch.tensor([len(e) for e in enc])
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            ids = torch.full((len(enc), int(lengths.max())), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, e in enumerate(enc):  # right padding: absolute positions stay put
                ids[j, :len(e)] = torch.tensor(e)
                mask[j, :len(e)] = 1
            hs = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                       output_hidden_states=True, use_cache=False).hidden_states
            last = (lengths - 1).to(hs[0].device)
            rows = torch.arange(len(enc), device=hs[0].device)
            out.append(torch.stack([h[rows, last] for h in hs[1:]]).float().cpu().numpy())
    return np.concatenate(out, axis=1) if out else np.zeros((0, 0, 0), dtype=np.float32)
