"""Batched beam search of the `hf` backend (persistent §3.1.1's candidate answers).

The search is transformers' own `generate(num_beams=k, num_return_sequences=k,
length_penalty=0.0, stop_strings=[...])`, as the persistent authors call it
(conset/gen_cands.py), step for step: each step keeps the best `max(2, 1 + #EOS) x k`
candidates; one that emits EOS or completes a stop string finishes only if it ranks among the
best `k` of them, the best `k` others run on; a prompt is done once `k` have finished and no
running beam scores higher. Scores are sums of token log-probabilities (length penalty 0).
tests/test_models_hf.py checks the beams against `generate` on every allowed transformers.
Our loop rather than `generate` for what it adds at the same result: a search runs
`batch_size` prompts (the model entry's, default 16) x `num_beams` rows per forward step
(`generate` runs one prompt's beams), each beam cut at its stop with the log-probability of
exactly its tokens; left-padded prompts with explicit
position ids, candidates' texts from token bytes (`compat.byte_level_table`), and where
`prefix_attention.supported` the prompt's KV kept once per prompt with only generated tokens
cached per beam; `BeamSearch` holds a batch's state and steps. Results do not depend on the
batch or on the attention path beyond float rounding (~1e-6).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Sequence

from selfknow.models.hf import prefix_attention
from selfknow.models.hf.compat import (cache_kwarg, decode_many, kv_cache, last_logits_only,
                                       takes_position_ids)
from selfknow.models.hf.generation import first_stop

if TYPE_CHECKING:
    from selfknow.models.hf.lm import HFLM


def candidates_kept(k: int, n_eos: int) -> int:
    """The candidates a step of a `k`-beam search looks at: transformers' `beams_to_keep`
    (`GenerationMixin._beam_search`) for a model with `n_eos` EOS token ids."""
    return max(2, 1 + n_eos) * k


class BeamSearch:
    """The state of one batched beam search (`search_group`) and its steps.

    Per prompt: its `running` hypotheses (generated ids, log-probability, decoded text) and its
    best `finished` ones (best first). A step's rows are `per_slot` per live prompt (`slots`;
    1 row each after the prefill, then `k`, prompt-major; a prompt with fewer running beams
    repeats its best one in rows whose output is ignored). `past` is the rows' KV cache: of the
    whole sequence, or with `shared_prefix` of the generated tokens only, each slot's prompt KV
    then kept once in `prefix` (read by `prefix_attention.shared_prefix_attention`)."""

    def __init__(self, lm: HFLM, prompt_ids: list[list[int]], k: int, stop: Sequence[str],
                 shared_prefix: bool):
        self.lm, self.model, self.k = lm, lm.model, k
        self.prompt_ids = prompt_ids
        self.eos = lm.eos_ids
        self.stops = [x for x in stop if x]
        self.table = lm.byte_table
        self.keep = candidates_kept(k, len(self.eos))
        self.vocab_k = min(self.keep, int(self.model.config.get_text_config().vocab_size))
        self.takes_positions = takes_position_ids(self.model)
        self.shared_prefix = shared_prefix
        n = len(prompt_ids)
        self.finished: list[list[dict]] = [[] for _ in range(n)]
        self.running: list[list[tuple[list[int], float, str]]] = [[([], 0.0, "")]
                                                                  for _ in range(n)]
        self.slots, self.per_slot = list(range(n)), 1
        self.past: Any = None
        self.prefix: dict[str, Any] | None = None
        self.mask: Any = None  # (rows, positions) attention mask of the full per-beam cache
        self.lengths: Any = None  # real tokens of each prompt

    def run(self, max_new_tokens: int) -> None:
        """Prefill, then one select-and-forward step per new token until every prompt is done
        or the token limit is reached."""
        logits = self.prefill()
        attention = prefix_attention.attention(self.model) if self.shared_prefix else nullcontext()
        with attention:
            for step in range(max_new_tokens):
                kept, src, last = self.select(logits)
                if not kept or step == max_new_tokens - 1:
                    break
                logits = self.forward(kept, src, last, step)

    def prefill(self):
        """The left-padded prompts through the model (its own attention); the logits after
        each prompt's last token."""
        import torch

        dev, n = self.model.device, len(self.prompt_ids)
        width = max(len(x) for x in self.prompt_ids)
        inp = torch.full((n, width), self.lm.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for r, x in enumerate(self.prompt_ids):  # left padding: every prompt ends last
            inp[r, width - len(x):] = torch.tensor(x)
            mask[r, width - len(x):] = 1
        self.mask, self.lengths = mask, mask.sum(-1)
        # positions count real tokens only, so a padded prompt sees the positions it would
        # see alone (a model without position ids runs prompts one at a time, unpadded)
        pos = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0).to(dev)} \
            if self.takes_positions else {}
        out = self.model(input_ids=inp.to(dev), attention_mask=mask.to(dev), **pos,
                         use_cache=True, **last_logits_only(self.model))
        self.past = kv_cache(out)
        if self.shared_prefix:
            from transformers import DynamicCache

            self.prefix = prefix_attention.prompt_kv(self.past, mask, self.k, dev)
            self.past = DynamicCache()
        return out.logits[:, -1, :]

    def select(self, logits) -> tuple[list[int], list[int], list[int]]:
        """One step's bookkeeping for every live prompt, from the rows' next-token logits.
        Returns what the next forward step needs: the old slot index of each prompt still
        running, the source row of each new row and its last token."""
        import torch

        logp = torch.log_softmax(logits.float(), dim=-1)
        top_lp, top_id = (t.tolist() for t in logp.topk(self.vocab_k, dim=-1))
        texts = self.candidate_texts(top_id)
        kept: list[int] = []
        src: list[int] = []
        last: list[int] = []
        for si, p in enumerate(self.slots):
            rows = self.select_prompt(p, si * self.per_slot, top_lp, top_id, texts)
            if not rows:
                continue
            nxt, pad = self.running[p], self.k - len(rows)  # filler rows: the best beam
            kept.append(si)
            src += rows + rows[:1] * pad
            last += [ids[-1] for ids, _, _ in nxt] + [nxt[0][0][-1]] * pad
        return kept, src, last

    def candidate_texts(self, top_id: list[list[int]]) -> dict[int, list[str]]:
        """The decoded text of each candidate (a running beam's tokens + one of its row's top
        tokens), by row: joined token bytes where the tokenizer is byte-level, else the
        tokenizer's decode of all candidates in one call."""
        rows = {si * self.per_slot + b: ids for si, p in enumerate(self.slots)
                for b, (ids, _, _) in enumerate(self.running[p])}
        table = self.table
        if table is not None and max(map(max, top_id)) < len(table):
            texts = {}
            for r, ids in rows.items():
                head = b"".join([table[t] for t in ids])
                texts[r] = [(head + table[t]).decode("utf-8", "replace") for t in top_id[r]]
            return texts
        flat = decode_many(self.lm.tokenizer, [ids + [t] for r, ids in rows.items() for t in top_id[r]])
        w = self.vocab_k
        return {r: flat[i * w:(i + 1) * w] for i, r in enumerate(rows)}

    def select_prompt(self, p: int, row0: int, top_lp: list[list[float]],
                      top_id: list[list[int]], texts: dict[int, list[str]]) -> list[int]:
        """Prompt `p`'s step (its beams in rows `row0`, ...): its best `keep` candidates, best
        first; one that emits EOS or completes a stop string finishes if it ranks among the
        first `k` (and is kept if among the best `k` finished), else it is dropped; the best
        `k` others run on. Returns their source rows, or [] when the prompt is done: nothing
        runs on, or `k` beams have finished and none running scores higher
        (log-probabilities only decrease, so none can catch up)."""
        fin, beams = self.finished[p], self.running[p]
        cands = [(score + lp, row0 + b, tid, j) for b, (_, score, _) in enumerate(beams)
                 for j, (lp, tid) in enumerate(zip(top_lp[row0 + b], top_id[row0 + b]))]
        cands.sort(key=lambda c: -c[0])
        nxt: list[tuple[list[int], float, str]] = []
        src: list[int] = []
        for rank, (score, r, tid, j) in enumerate(cands[:self.keep]):
            if len(nxt) == self.k and self.outranked(fin, score):
                break  # sorted: nothing later can run on or finish in the top k
            text, ids = texts[r][j], beams[r - row0][0] + [tid]
            cut = text.find(self.stops[0]) if len(self.stops) == 1 else \
                first_stop(text, self.stops)
            if tid in self.eos or cut >= 0:
                if rank < self.k:
                    self.add_finished(fin, ids, text, cut, score)
            elif len(nxt) < self.k:
                nxt.append((ids, score, text))
                src.append(r)
        done = not nxt or self.outranked(fin, nxt[0][1])
        self.running[p] = [] if done else nxt
        return [] if done else src

    def outranked(self, fin: list[dict], score: float) -> bool:
        """Whether `score` is no better than the worst of `k` finished beams."""
        return len(fin) >= self.k and score <= fin[-1]["logprob"]

    def add_finished(self, fin: list[dict], ids: list[int], raw: str, cut: int, score: float) -> None:
        """Add a stopped beam (decoded `raw`, its stop at `cut`, -1 for EOS) to a prompt's
        finished beams if it is among the best `k`."""
        if self.outranked(fin, score):
            return
        fin.append({"ids": ids, "text": raw if cut < 0 else raw[:cut], "raw": raw, "logprob": score,
                    "finish_reason": "stop"})
        fin.sort(key=lambda f: -f["logprob"])
        del fin[self.k:]

    def forward(self, kept: list[int], src: list[int], last: list[int], step: int):
        """The next step's forward pass over `k` rows per kept slot (see `select`): the cache
        rows re-selected by each new row's source, the last tokens in; returns their
        next-token logits."""
        import torch

        dev = self.model.device
        sel = torch.tensor(src, device=dev)
        self.past.reorder_cache(sel)
        kw: dict[str, Any] = {cache_kwarg(self.model): self.past}
        if self.shared_prefix:
            if kept != list(range(len(self.slots))):  # some prompts are done: drop their KV
                prefix_attention.keep_slots(self.prefix, torch.tensor(kept, device=dev))
            kw["beam_prefix"] = self.prefix
        else:
            self.mask = torch.cat([self.mask[sel.cpu()],
                                   torch.ones((len(src), 1), dtype=torch.long)], 1)
            kw["attention_mask"] = self.mask.to(dev)
        if self.takes_positions:
            kw["position_ids"] = torch.tensor(
                [int(self.lengths[self.slots[si]]) + step for si in kept for _ in range(self.k)],
                device=dev).unsqueeze(1)
        self.slots, self.per_slot = [self.slots[si] for si in kept], self.k
        out = self.model(input_ids=torch.tensor(last, device=dev).unsqueeze(1), use_cache=True,
                         **kw)
        self.past = kv_cache(out)
        return out.logits[:, -1, :]

    def final_beams(self) -> list[list[dict]]:
        """Per prompt: its finished beams plus those still running at the token limit
        ("length"), best `k`."""
        out = []
        for fin, running in zip(self.finished, self.running):
            beams = fin + [{"ids": ids, "text": text, "raw": text, "logprob": score,
                            "finish_reason": "length"} for ids, score, text in running]
            beams.sort(key=lambda f: -f["logprob"])
            out.append(beams[:self.k])
        return out


def beam_groups(lm: HFLM, ids: Sequence[list[int]]) -> list[list[int]]:
    """Batches of prompt indices, longest first (little padding). Left padding needs explicit
    position ids; a model whose forward takes none is run one prompt at a time."""
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    if not takes_position_ids(lm.model):
        return [[i] for i in order]
    return list(lm.batches(order))


def search_group(lm: HFLM, prompt_ids: list[list[int]], k: int, max_new_tokens: int,
                 stop: list[str], shared_prefix: bool | None = None) -> list[list[dict]]:
    """Beam search for a batch of prompts (`BeamSearch`): a left-padded prefill, then one
    forward step per token over `k` rows for every unfinished prompt, the KV cache rows
    re-selected by each new beam's origin. The per-prompt bookkeeping is the one-prompt
    algorithm of `HFLM.beam_search_batch`, run on each prompt's slice of the step.

    `shared_prefix`: whether the steps use `prefix_attention` (default: where it is
    `supported`); False runs the plain full per-beam cache."""
    import torch

    if shared_prefix is None:
        shared_prefix = prefix_attention.supported(lm.model)
    search = BeamSearch(lm, prompt_ids, k, stop, shared_prefix)
    if max_new_tokens > 0:
        with torch.inference_mode():
            search.run(max_new_tokens)
    return search.final_beams()
