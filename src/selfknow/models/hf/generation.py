"""Greedy and sampled generation of the `hf` backend (transformers' `generate`).

All decoding is deterministic: greedy, or sampling seeded from (prompt, sample index) so that a
sample does not depend on its batch (`SeededSampler`). A reply is cut at the first EOS or stop
string, with the number of tokens the model produced up to the stopping one (`finish`).
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from selfknow.models.hf.lm import HFLM


def first_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest stop string in `text`, or -1."""
    hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(hits) if hits else -1


def sample_seed(prompt: str, sample_index: int) -> int:
    """The sampling seed of one (prompt, sample index)."""
    return int(hashlib.sha256(f"{sample_index}\0{prompt}".encode()).hexdigest()[:15], 16)


class SeededSampler:
    """A logits processor that draws each row's next token from softmax(logits / T) with that
    row's own generator and leaves only the drawn token finite (so greedy decoding takes it)."""

    def __init__(self, temperature: float, seeds: Sequence[tuple[str, int]]):
        import torch

        self.temperature = temperature
        self.generators = [torch.Generator().manual_seed(sample_seed(p, k)) for p, k in seeds]

    def __call__(self, input_ids, scores):
        import torch

        probs = torch.softmax(scores.float() / self.temperature, dim=-1).cpu()
        drawn = [torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(self.generators)]
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(len(drawn)), torch.cat(drawn).to(scores.device)] = 0.0
        return out


def generate_ids(lm: HFLM, ids: list[list[int]], max_new_tokens: int, stop: list[str],
                 temperature: float, seeds: list[tuple[str, int]],
                 schemas: list[dict] | None = None) -> list[dict]:
    """The reply to each prompt (token ids), `lm.batch_size` left-padded prompts per
    `generate` call, longest first; `seeds` the (prompt, sample index) of each, `schemas`
    the JSON schema each reply must follow (`json_constraint`)."""
    import torch
    from transformers import GenerationConfig

    model, tok = lm.model, lm.tokenizer
    eos = sorted(lm.eos_ids)
    # explicit values: generate() fills every unset (None) field from the checkpoint's
    # generation_config.json, which may carry a repetition penalty or top-p we must not use
    cfg = dict(max_new_tokens=max_new_tokens, num_beams=1, pad_token_id=lm.pad_id,
               eos_token_id=eos or None, repetition_penalty=1.0, no_repeat_ngram_size=0,
               min_new_tokens=0)
    # Sampling runs as greedy decoding over logits that a seeded sampler has reduced to the
    # drawn token: each row draws from its own generator, seeded by (prompt, sample index),
    # so a sample does not depend on the batch it ran in and prompts batch like greedy ones.
    cfg.update(do_sample=False)
    if stop:
        cfg["stop_strings"] = stop
    gen_cfg = GenerationConfig(**cfg)
    results: list[dict | None] = [None] * len(ids)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    for group in lm.batches(order):
        width = max(len(ids[i]) for i in group)
        inp = torch.full((len(group), width), lm.pad_id, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for r, i in enumerate(group):  # left padding: every prompt ends at the same column
            inp[r, width - len(ids[i]):] = torch.tensor(ids[i])
            mask[r, width - len(ids[i]):] = 1
        processors = []
        if schemas is not None:  # before the sampler, which draws from what it leaves
            from selfknow.models.json_constraint import SchemaLogitsProcessor

            processors.append(SchemaLogitsProcessor(
                lm.enforcer_data, [schemas[i] for i in group], width, eos))
        if temperature > 0:
            processors.append(SeededSampler(temperature, [seeds[i] for i in group]))
        extra = {"logits_processor": processors} if processors else {}
        with torch.inference_mode():
            out = model.generate(input_ids=inp.to(model.device),
                                 attention_mask=mask.to(model.device),
                                 generation_config=gen_cfg, tokenizer=tok, **extra)
        for r, i in enumerate(group):
            gen = out[r, width:].tolist()
            results[i] = finish(tok, lm.eos_ids, gen, len(ids[i]), stop)
    return results  # type: ignore[return-value]


def finish(tok, eos: set[int], gen: list[int], n_in: int, stop: list[str]) -> dict:
    """Cut generated ids at the first EOS or stop string: text (before the stop), and the
    number of tokens the model produced up to and including the stopping token."""
    cut = next((k + 1 for k, t in enumerate(gen) if t in eos), None)
    span = gen if cut is None else gen[:cut]
    text = tok.decode(span, skip_special_tokens=True)
    pos = first_stop(text, stop)
    if pos >= 0:
        # smallest prefix whose text holds a stop (monotone in the prefix length)
        lo, hi = 1, len(span)
        while lo < hi:
            mid = (lo + hi) // 2
            if first_stop(tok.decode(span[:mid], skip_special_tokens=True), stop) >= 0:
                hi = mid
            else:
                lo = mid + 1
        return {"text": text[:pos], "tokens_in": n_in, "tokens_out": lo,
                "finish_reason": "stop"}
    if cut is not None:
        return {"text": text, "tokens_in": n_in, "tokens_out": cut, "finish_reason": "stop"}
    return {"text": text, "tokens_in": n_in, "tokens_out": len(gen),
            "finish_reason": "length"}
