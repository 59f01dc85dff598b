"""Scoring calls of the `hf` backend: continuation log-likelihoods (lm-evaluation-harness's
context/continuation split) and next-token log-probabilities of given candidates (confidence
read-outs, judges), over right-padded batches.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from selfknow.models.hf.compat import base_class, cache_kwarg, forward_params, kv_cache

if TYPE_CHECKING:
    from selfknow.models.hf.lm import HFLM

_ROW_POSITIONS: dict[type, bool] = {}  # whether logits_to_keep takes per-row positions
# A batch whose rows share at least this many leading tokens runs them once (see below).
MIN_SHARED_PREFIX = 16


def shared_prefix_length(input_ids, lengths) -> int:
    """Leading tokens equal in every row, leaving every row at least one token of its own."""
    m = int(lengths.min()) - 1
    if m <= 0 or input_ids.shape[0] < 2:
        return 0
    same = (input_ids[:, :m] == input_ids[:1, :m]).all(dim=0)
    return m if bool(same.all()) else int(same.int().argmin())


def last_position_logits(model, input_ids, attention_mask, lengths):
    """(rows, V) logits after each row's last real token (right padding, `lengths` real tokens
    per row), with or without gradients.

    Two savings, both exact up to float rounding. Rows that share a prefix of at least
    MIN_SHARED_PREFIX tokens (a fixed instruction: 61 of the 86 tokens of a verbalized-
    confidence prompt for the mini world's models) run it once, its KV cache repeated for
    every row. Where the forward takes per-row ``logits_to_keep`` (transformers >= 5) the LM
    head runs at the last positions only: on a small model it costs about as much per
    position as the whole body (2 layers of width 96 against a 2,052-token head)."""
    import torch

    params = forward_params(model)
    base_cls = base_class(model)
    lengths = torch.as_tensor(lengths, device=input_ids.device)
    rows = input_ids.shape[0]
    prefix = shared_prefix_length(input_ids, lengths)
    if prefix < MIN_SHARED_PREFIX or "position_ids" not in params:
        prefix = 0  # without position ids the model could not place a cached prefix
    last = lengths - 1 - prefix

    def run(keep_rows: bool):
        kw: dict[str, Any] = {"use_cache": bool(prefix)}
        if prefix:
            out = model(input_ids=input_ids[:1, :prefix], attention_mask=attention_mask[:1, :prefix],
                        use_cache=True)
            cache = kv_cache(out)
            cache.batch_repeat_interleave(rows)
            kw[cache_kwarg(model)] = cache
        if keep_rows:
            kw["logits_to_keep"] = last[:, None]
        return model(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, **kw).logits

    if "logits_to_keep" in params and _ROW_POSITIONS.get(base_cls, True):
        logits = run(True)
        if logits.ndim == 3 and logits.shape[:2] == (rows, 1):
            return logits[:, 0]
        _ROW_POSITIONS[base_cls] = False  # an older model's slicing: positions for all rows only
    logits = run(False)
    return logits[torch.arange(rows, device=logits.device), last.to(logits.device)]


def right_padded(seqs: Sequence[list[int]], pad_id: int):
    """(ids, attention mask) of `seqs` padded on the right to the longest."""
    import torch

    width = max(len(s) for s in seqs)
    inp = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        inp[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = 1
    return inp, mask


def encode_pair(lm: HFLM, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval-harness's split: trailing spaces of the context move to the continuation;
    context+continuation is tokenised jointly and split after len(tokenise(context)), so
    the continuation is scored with the tokens the model would really produce."""
    n_space = len(context) - len(context.rstrip(" "))
    if n_space:
        continuation = context[-n_space:] + continuation
        context = context[:-n_space]
    whole = lm.encode(context + continuation, chat=False)
    if context:
        n_ctx = len(lm.encode(context, chat=False))
        return whole[:n_ctx], whole[n_ctx:]
    # empty context: condition on BOS (or EOS), as the harness does
    start = lm.tokenizer.bos_token_id
    if start is None:
        start = lm.tokenizer.eos_token_id
    if start is None:
        raise ValueError(f"model {lm.name!r}: empty context and no BOS/EOS token")
    cont = lm.encode(continuation, chat=False)
    if cont and cont[0] == start:
        cont = cont[1:]
    return [int(start)], cont


def token_logprobs(lm: HFLM, seqs: list[list[int]]) -> list[np.ndarray]:
    """For each sequence, log p(token t | tokens < t) for t = 1..len-1."""
    import torch

    model = lm.model
    out: list[np.ndarray | None] = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    for group in lm.batches(order):
        inp, mask = right_padded([seqs[i] for i in group], lm.pad_id)
        with torch.inference_mode():
            logits = model(input_ids=inp.to(model.device),
                           attention_mask=mask.to(model.device)).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        tgt = inp[:, 1:].to(logp.device)
        lp = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).cpu().numpy()
        for r, i in enumerate(group):
            out[i] = lp[r, :len(seqs[i]) - 1].astype(np.float64)
    return out  # type: ignore[return-value]


def candidate_logprobs(lm: HFLM, seqs: list[list[int]], cand_ids: list[int],
                       names: Sequence) -> list[list[float]]:
    """For each sequence, the log-probabilities of the tokens `cand_ids` after its last token;
    `names` name the sequences in a too-long error."""
    import torch

    model = lm.model
    res: list[list[float] | None] = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda j: -len(seqs[j]))
    for group in lm.batches(order):
        lm.check_length(len(seqs[group[0]]), f"prompt {names[group[0]]}")
        inp, mask = right_padded([seqs[j] for j in group], lm.pad_id)
        with torch.inference_mode():
            last = last_position_logits(model, inp.to(model.device), mask.to(model.device),
                                        [len(seqs[j]) for j in group])
        lp = torch.log_softmax(last.float(), -1)
        sel = lp[:, cand_ids].cpu().numpy().astype(np.float64)
        for r, j in enumerate(group):
            res[j] = sel[r].tolist()
    return res  # type: ignore[return-value]
