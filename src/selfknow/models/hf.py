"""`hf` backend: local Hugging Face `transformers` causal LMs (SPEC §0.4).

A model comes from a hub id (+ a `revision` per checkpoint), a local dir (one dir per checkpoint)
or a GGUF file (`gguf_file=`, dequantised by transformers), optionally with a LoRA adapter dir
loaded with peft on top. All decoding is deterministic: greedy, or sampling seeded from
(prompt, sample index) so that a sample does not depend on its batch.

Memory. LMs of one base checkpoint in a process share one copy of its weights
(`_ResidentBase`); their adapters are loaded, switched and dropped on it with peft's
multi-adapter API, with outputs equal to those of a model loaded alone with that adapter.
`release()` frees a base (then `gc` and the CUDA cache; without it the base goes with the last
LM using it), and the job log reports the base loads and the most bases alive at once
(`registry.track_base`). A model with `gpu` > 1 on CUDA
is sharded over those GPUs by accelerate (`device_map="auto"`, `max_memory` per GPU) in
bfloat16 (float16 if the config says so).

Beam search is our own loop (`beam_search_batch`) rather than `model.generate(num_beams=...)`:
persistent §3.1.1 needs every final beam cut at the first newline with the log-probability of
exactly its tokens up to that stop, and HF's beam scorer only stops hypotheses at EOS (its
`stop_strings` criterion ends the whole search) and reports length-normalised scores. It runs
`batch_size` prompts (the model entry's, default 16) x `num_beams` rows per forward step:
left-padded prompts with explicit position ids, the prompt's KV kept once per prompt and only
generated tokens cached per beam (`_shared_prefix_attention`, set as the model's attention
for the search's steps with transformers' `set_attn_implementation`), candidates' texts from
token bytes (`_byte_table`); `_BeamSearch` holds a batch's state and steps. Results do not
depend on the batch beyond float rounding (~1e-6).
"""
from __future__ import annotations

import hashlib
import logging
import weakref
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from selfknow.config import is_chat
from selfknow.models.base import (LM, Beam, CallStats, Generation, constrained_schemas,
                                  structured_output)
from selfknow.models.cache import CachedCalls, PartialFailure, hash_files
from selfknow.models.registry import ModelSpecError, free_memory, register_backend, track_base

log = logging.getLogger(__name__)

# prompts per forward pass (spec key `batch_size`); a beam-search batch runs
# batch_size x num_beams rows per step. 16 x 10 beams keeps a small model's CPU steps in a few
# hundred rows, where batching has amortised the per-call overhead (benchmarks/bench_beam.py).
_SAMPLE_BYTES = 1 << 20  # fingerprint of local model files: size + first/last MiB
# share of each GPU a sharded model's weights may fill; the rest holds activations and the
# KV cache of a batch (`batch_size` prompts x beams)
GPU_MEMORY_FRACTION = 0.85


def _first_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest stop string in `text`, or -1."""
    hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(hits) if hits else -1


def _kv_cache(out):
    """The KV cache of a forward output: `cache` from transformers 5.2x, else
    `past_key_values`."""
    return out["cache"] if "cache" in out else out["past_key_values"]


_FORWARD_PARAMS: dict[type, frozenset] = {}
_ROW_POSITIONS: dict[type, bool] = {}  # whether logits_to_keep takes per-row positions
# A batch whose rows share at least this many leading tokens runs them once (see below).
_MIN_SHARED_PREFIX = 16


def _base_class(model) -> type:
    """The class of the model under a peft wrapper (the model's own class without one)."""
    return type(model.get_base_model() if hasattr(model, "get_base_model") else model)


def forward_params(model) -> frozenset:
    """Names of the arguments of the (peft-wrapped) model's forward, cached per class."""
    cls = _base_class(model)
    if cls not in _FORWARD_PARAMS:
        import inspect

        _FORWARD_PARAMS[cls] = frozenset(inspect.signature(cls.forward).parameters)
    return _FORWARD_PARAMS[cls]


def cache_kwarg(model) -> str:
    """Name of the forward argument taking the KV cache (renamed in transformers 5.2x)."""
    return "cache" if "cache" in forward_params(model) else "past_key_values"


def _shared_prefix_length(input_ids, lengths) -> int:
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
    _MIN_SHARED_PREFIX tokens (a fixed instruction: 61 of the 86 tokens of a verbalized-
    confidence prompt for the mini world's models) run it once, its KV cache repeated for
    every row. Where the forward takes per-row ``logits_to_keep`` (transformers >= 5) the LM
    head runs at the last positions only: on a small model it costs about as much per
    position as the whole body (2 layers of width 96 against a 2,052-token head)."""
    import torch

    params = forward_params(model)
    base_cls = _base_class(model)
    lengths = torch.as_tensor(lengths, device=input_ids.device)
    rows = input_ids.shape[0]
    prefix = _shared_prefix_length(input_ids, lengths)
    if prefix < _MIN_SHARED_PREFIX or "position_ids" not in params:
        prefix = 0  # without position ids the model could not place a cached prefix
    last = lengths - 1 - prefix

    def run(keep_rows: bool):
        kw: dict[str, Any] = {"use_cache": bool(prefix)}
        if prefix:
            out = model(input_ids=input_ids[:1, :prefix], attention_mask=attention_mask[:1, :prefix],
                        use_cache=True)
            cache = _kv_cache(out)
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


def _gpt2_byte_chars() -> dict[str, int]:
    """Inverse of the GPT-2 byte-level alphabet: printable bytes stand for themselves, the
    others for the characters 256, 257, ... in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
            *range(ord("\xae"), ord("\xff") + 1)]
    chars = {chr(b): b for b in keep}
    extra = 0
    for b in range(256):
        if b not in keep:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _byte_level_table(tok) -> list[bytes] | None:
    """See `HFLM._byte_table`."""
    import json

    backend = getattr(tok, "_tokenizer", None)
    if backend is None or getattr(tok, "clean_up_tokenization_spaces", False):
        return None
    try:
        cfg = json.loads(backend.to_str())
    except Exception:  # a tokenizer that cannot serialise itself: decode the slow way
        return None
    if (cfg.get("decoder") or {}).get("type") != "ByteLevel":
        return None
    inv = _gpt2_byte_chars()
    special = {a["id"] for a in cfg.get("added_tokens", []) if a.get("special")}
    n = backend.get_vocab_size(with_added_tokens=True)
    table = []
    for t in range(n):
        piece = backend.id_to_token(t)
        if piece is None:
            return None
        table.append(b"" if t in special else
                     b"".join(bytes([inv[c]]) if c in inv else c.encode() for c in piece))
    alone = backend.decode_batch([[t] for t in range(n)], skip_special_tokens=True)
    if any(b.decode("utf-8", "replace") != a for a, b in zip(alone, table)):
        return None
    return table


_PREFIX_ATTN = "selfknow_shared_prefix"


def _shared_prefix_attention(module, query, key, value, attention_mask, scaling=None,
                             dropout=0.0, **kwargs):
    """Attention of beam rows over their prompt's KV (stored once per prompt, not once per
    beam) followed by their own generated tokens' KV (`key`/`value`, from a cache that holds
    generated tokens only). Rows are prompt-major, `k` per prompt; the prompt's padding is
    masked out. Set as the model's attention only around `_BeamSearch` steps, which pass the
    prompts' KV as the `beam_prefix` keyword."""
    prefix = kwargs.get("beam_prefix")
    if prefix is None:  # a model whose forward does not hand its keywords to the attention
        raise RuntimeError(f"{type(module).__name__}: the shared-prefix beam attention got no "
                           "beam_prefix keyword")
    import torch

    k_pre, v_pre = prefix["keys"][module.layer_idx], prefix["values"][module.layer_idx]
    bias, k = prefix["bias"], prefix["k"]  # bias: (slots, prefix length), 0 or -inf
    rows, n_q, q_len, d = query.shape
    slots, n_kv = k_pre.shape[0], k_pre.shape[1]
    g = n_q // n_kv  # query heads per KV head (grouped-query attention)
    scale = d ** -0.5 if scaling is None else scaling
    q = query.float().reshape(slots, k, n_kv, g, d)
    s_pre = torch.einsum("skhgd,shwd->skhgw", q, k_pre.float()) * scale
    s_pre = s_pre + bias[:, None, None, None, :]
    kg = key.float().reshape(slots, k, n_kv, -1, d)
    s_gen = torch.einsum("skhgd,skhtd->skhgt", q, kg) * scale
    w = torch.softmax(torch.cat([s_pre, s_gen], -1), -1)
    width = k_pre.shape[2]
    out = torch.einsum("skhgw,shwd->skhgd", w[..., :width], v_pre.float()) \
        + torch.einsum("skhgt,skhtd->skhgd", w[..., width:],
                       value.float().reshape(slots, k, n_kv, -1, d))
    return out.reshape(rows, 1, n_q, d).to(query.dtype), None


def _register_prefix_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if _PREFIX_ATTN not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(_PREFIX_ATTN, _shared_prefix_attention)
        AttentionMaskInterface.register(_PREFIX_ATTN, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


@contextmanager
def _attention_implementation(model, name: str):
    """Run the block with `model`'s attention implementation set to `name` through transformers'
    public `set_attn_implementation`, the model's own restored afterwards (also on error).
    Transformers 5.24 picks the attention function from the model's config, with no per-call
    argument, so a beam search sets it once around all its steps."""
    saved = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(saved)


class _BeamSearch:
    """The state of one batched beam search (`HFLM._beam_search_group`) and its steps.

    Per prompt: its `running` hypotheses (generated ids, log-probability, decoded text) and its
    best `finished` ones (best first). A step's rows are `per_slot` per live prompt (`slots`;
    1 row each after the prefill, then `k`, prompt-major; a prompt with fewer running beams
    repeats its best one in rows whose output is ignored). `past` is the rows' KV cache: of the
    whole sequence, or with `shared_prefix` of the generated tokens only, each slot's prompt KV
    then kept once in `prefix` (read by `_shared_prefix_attention`)."""

    def __init__(self, lm: HFLM, prompt_ids: list[list[int]], k: int, stop: Sequence[str],
                 shared_prefix: bool):
        self.lm, self.model, self.k = lm, lm.model, k
        self.prompt_ids = prompt_ids
        self.eos = lm.eos_ids
        self.stops = [x for x in stop if x]
        self.table = lm._byte_table
        self.vocab_k = min(2 * k, int(self.model.config.get_text_config().vocab_size))
        self.takes_positions = lm._takes_position_ids
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
        attention: Any = nullcontext()
        if self.shared_prefix:
            _register_prefix_attention()
            attention = _attention_implementation(self.model, _PREFIX_ATTN)
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
        from transformers import DynamicCache

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
                         use_cache=True, **self.lm._last_logits_only)
        self.past = _kv_cache(out)
        if self.shared_prefix:
            self.prefix = {"keys": [layer.keys for layer in self.past.layers],
                           "values": [layer.values for layer in self.past.layers],
                           "bias": torch.zeros(mask.shape, dtype=torch.float32, device=dev)
                           .masked_fill(mask.to(dev) == 0, float("-inf")), "k": self.k}
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
        flat = self.lm._decode_many([ids + [t] for r, ids in rows.items() for t in top_id[r]])
        w = self.vocab_k
        return {r: flat[i * w:(i + 1) * w] for i, r in enumerate(rows)}

    def select_prompt(self, p: int, row0: int, top_lp: list[list[float]],
                      top_id: list[list[int]], texts: dict[int, list[str]]) -> list[int]:
        """Prompt `p`'s step (its beams in rows `row0`, ...): its candidates best first; one
        that emits EOS or completes a stop string finishes (kept if among the best `k`
        finished), the best `k` others run on. Returns their source rows, or [] when the
        prompt is done: nothing runs on, or `k` beams have finished and none running scores
        higher (log-probabilities only decrease, so none can catch up)."""
        fin, beams = self.finished[p], self.running[p]
        cands = [(score + lp, row0 + b, tid, j) for b, (_, score, _) in enumerate(beams)
                 for j, (lp, tid) in enumerate(zip(top_lp[row0 + b], top_id[row0 + b]))]
        cands.sort(key=lambda c: -c[0])
        nxt: list[tuple[list[int], float, str]] = []
        src: list[int] = []
        for score, r, tid, j in cands:
            if len(nxt) == self.k and self.outranked(fin, score):
                break  # sorted: nothing later can run on or finish in the top k
            text, ids = texts[r][j], beams[r - row0][0] + [tid]
            cut = text.find(self.stops[0]) if len(self.stops) == 1 else \
                _first_stop(text, self.stops)
            if tid in self.eos or cut >= 0:
                self.add_finished(fin, ids, text if cut < 0 else text[:cut], score)
            elif len(nxt) < self.k:
                nxt.append((ids, score, text))
                src.append(r)
        done = not nxt or self.outranked(fin, nxt[0][1])
        self.running[p] = [] if done else nxt
        return [] if done else src

    def outranked(self, fin: list[dict], score: float) -> bool:
        """Whether `score` is no better than the worst of `k` finished beams."""
        return len(fin) >= self.k and score <= fin[-1]["logprob"]

    def add_finished(self, fin: list[dict], ids: list[int], text: str, score: float) -> None:
        """Add a stopped beam to a prompt's finished beams if it is among the best `k`."""
        if self.outranked(fin, score):
            return
        fin.append({"ids": ids, "text": text, "logprob": score, "finish_reason": "stop"})
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
            self.keep_prefix(kept)
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
        self.past = _kv_cache(out)
        return out.logits[:, -1, :]

    def keep_prefix(self, kept: list[int]) -> None:
        """Drop the prompt KV of the slots whose prompts are done."""
        if kept == list(range(len(self.slots))):
            return
        import torch

        ks = torch.tensor(kept, device=self.model.device)
        for key in ("keys", "values"):
            self.prefix[key] = [t.index_select(0, ks) for t in self.prefix[key]]
        self.prefix["bias"] = self.prefix["bias"].index_select(0, ks)

    def final_beams(self) -> list[list[dict]]:
        """Per prompt: its finished beams plus those still running at the token limit
        ("length"), best `k`."""
        out = []
        for fin, running in zip(self.finished, self.running):
            beams = fin + [{"ids": ids, "text": text, "logprob": score,
                            "finish_reason": "length"} for ids, score, text in running]
            beams.sort(key=lambda f: -f["logprob"])
            out.append(beams[:self.k])
        return out


def sample_seed(prompt: str, sample_index: int) -> int:
    """The sampling seed of one (prompt, sample index)."""
    return int(hashlib.sha256(f"{sample_index}\0{prompt}".encode()).hexdigest()[:15], 16)


class _SeededSampler:
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


def shard_kwargs(name: str, n_gpus: int, gpu_bytes: Sequence[int] | None = None) -> dict:
    """`from_pretrained` arguments that spread model `name` over `n_gpus` GPUs with accelerate
    (`device_map="auto"`), each filled to GPU_MEMORY_FRACTION of its memory (`gpu_bytes`;
    default: the visible devices' total memory)."""
    if gpu_bytes is None:
        import torch

        gpu_bytes = [torch.cuda.get_device_properties(i).total_memory
                     for i in range(min(n_gpus, torch.cuda.device_count()))]
    if len(gpu_bytes) < n_gpus:
        raise ModelSpecError(f"model {name!r}: gpu: {n_gpus} asks for a model sharded over "
                             f"{n_gpus} GPUs but {len(gpu_bytes)} CUDA device(s) are visible")
    return {"device_map": "auto",
            "max_memory": {i: int(b * GPU_MEMORY_FRACTION) for i, b in enumerate(gpu_bytes[:n_gpus])}}


class _ResidentBase:
    """The one resident copy of a base checkpoint's weights in this process, with the LoRA
    adapters loaded on it by peft's multi-adapter API (`load_adapter` / `set_adapter` /
    `delete_adapter`): switching adapters costs no reload, and a model without an adapter
    runs with the adapter layers disabled (their base layers alone, bit for bit the plain
    model)."""

    def __init__(self, model, sharded: bool, device: str):
        self.model = model
        self.sharded, self.device = sharded, device
        self.adapters: set[str] = set()
        self.active: str | None = None

    def activate(self, path: str | None, name: str | None):
        """The model with adapter `name` (loaded from `path` on first use) active, or with
        no adapter active when `name` is None."""
        if name is None:
            if self.active is not None:
                self.model.base_model.disable_adapter_layers()
                self.active = None
            return self.model
        if name not in self.adapters:
            if not self.adapters:
                from peft import PeftModel

                self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name)
            else:
                self.model.load_adapter(path, adapter_name=name)
            if not self.sharded:  # a sharded base's adapter layers sit on their layer's GPU
                self.model.to(self.device)
            self.model.eval()
            self.adapters.add(name)
            self.active = None
        if self.active != name:
            self.model.base_model.enable_adapter_layers()
            self.model.set_adapter(name, inference_mode=True)  # frozen, as when loaded alone
            self.active = name
        return self.model

    def drop(self, name: str) -> None:
        """Delete adapter `name`; without adapters left, the plain base model again."""
        if name not in self.adapters:
            return
        self.adapters.discard(name)
        if self.adapters:
            if self.active == name:
                self.model.base_model.disable_adapter_layers()
                self.active = None
            self.model.delete_adapter(name)
        else:
            self.model = self.model.unload()
            self.active = None


#: base key (`HFLM._base_key`) -> its resident weights, alive while an LM of it is
_RESIDENT: "weakref.WeakValueDictionary[tuple, _ResidentBase]" = weakref.WeakValueDictionary()


def release_bases() -> None:
    """Free every resident base model of this process."""
    for base in list(_RESIDENT.values()):
        base.model = None
    _RESIDENT.clear()
    free_memory()


@contextmanager
def hub_resolution(name: str, checkpoint: str, hub_id: str, revision: str | None):
    """Turn a hub id or revision that cannot be resolved in the block (a typo, a revision the
    repository lacks, a gated or private repository, weights missing from the local cache under
    HF_HUB_OFFLINE=1, an unreachable hub) into a ModelSpecError naming the model entry, the hub id
    and the revision, with the hub's reason; transformers and huggingface_hub raise these as
    OSErrors without an errno (an errno means a local file-system error, passed on as it is)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError

    try:
        yield
    except (OSError, HFValidationError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise
        where = "the local Hugging Face cache (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else "the hub"
        reason = " ".join(str(err).split())[:300]
        raise ModelSpecError(f"model {name!r} checkpoint {checkpoint!r}: hub id {hub_id!r} at revision "
                             f"{revision or 'main'!r} cannot be resolved from {where} (keys 'hub_id', "
                             f"'revision'): {type(err).__name__}: {reason}") from None


@register_backend("hf")
class HFLM(LM):
    """A transformers causal LM at one checkpoint (see module docstring)."""

    def __init__(self, spec: dict, checkpoint: dict, *, cache_dir=None, adapter=None):
        self.spec, self.checkpoint = spec, checkpoint
        self.name = spec["name"]
        self.stats = CallStats()
        self.batch_size = int(spec["batch_size"])
        self.chat_default = is_chat(spec)
        self.structured_output = structured_output(spec)
        self.dtype_name = spec["dtype"]
        if self.sharded and self.dtype_name not in ("bfloat16", "float16"):
            self.dtype_name = "bfloat16"  # float32 would double the GPUs a sharded model needs
        self.gguf_file = checkpoint.get("gguf_file", spec.get("gguf_file"))
        self.adapter = None if adapter is None else str(Path(adapter).resolve())

        if "path" in checkpoint:
            self.source, self.local = str(checkpoint["path"]), True
        elif "path" in spec:
            root = Path(spec["path"])
            # multi-checkpoint local model: a dir per checkpoint under `path`
            self.source = str(root / checkpoint["name"]) if spec.get("checkpoints") else str(root)
            self.local = True
        else:
            self.source, self.local = spec["hub_id"], False
        self._hub_revision = None if self.local else checkpoint.get("revision",
                                                                     spec.get("revision"))
        # for records: the hub revision, or the local checkpoint's name (its content
        # fingerprint is part of the cache key, see _identity)
        self.revision = self._hub_revision if not self.local else checkpoint["name"]
        if self.local and not Path(self.source).is_dir():
            raise ModelSpecError(f"model {self.name!r} checkpoint {checkpoint['name']!r}: "
                                 f"local dir {self.source!r} not found (key 'path')")
        if self.gguf_file and self.local and not (Path(self.source) / self.gguf_file).is_file():
            raise ModelSpecError(f"model {self.name!r}: gguf_file {self.gguf_file!r} not found "
                                 f"in {self.source!r}")
        self.model_id = self.source if not self.local else f"local:{self.name}"
        self._key: tuple | None = None
        self._base: _ResidentBase | None = None
        self._adapter_name: str | None = None
        self._tokenizer = None
        self._calls = CachedCalls(cache_dir, self._identity, self.stats)

    # ---- identity and lazy loading -----------------------------------------------------
    def identity(self) -> dict:
        return self._calls.identity

    def _identity(self, with_adapter: bool = True) -> dict:
        """What makes this model's answers what they are: for local dirs a content
        fingerprint (so a retrained model misses), for the hub the revision; plus the dtype,
        GGUF file and adapter (path + full content hash of its weights)."""
        if self.local:
            target = Path(self.source) / self.gguf_file if self.gguf_file else Path(self.source)
            revision = f"{self.checkpoint['name']}@{hash_files(target, sample_bytes=_SAMPLE_BYTES)}"
        else:
            revision = self._hub_revision or "main"
        adapter = None
        if self.adapter is not None and with_adapter:
            adapter = {"path": self.adapter, "sha256": hash_files(self.adapter)}
        template = self.spec.get("chat_template_kwargs")  # changes what chat prompts render to
        return {"backend": "hf", "model_id": self.model_id, "revision": revision,
                "gguf_file": self.gguf_file, "dtype": self.dtype_name, "adapter": adapter,
                **({"chat_template_kwargs": template} if template else {})}

    @property
    def device(self) -> str:
        dev = self.spec["device"]
        if dev == "auto":
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        return dev

    def _load_kwargs(self) -> dict:
        kw: dict[str, Any] = {}
        if self._hub_revision:
            kw["revision"] = self._hub_revision
        if self.gguf_file:
            kw["gguf_file"] = self.gguf_file
        if self.spec.get("trust_remote_code"):
            kw["trust_remote_code"] = True
        return kw

    def _resolving(self):
        """`hub_resolution` for this checkpoint (nothing to resolve for a local dir)."""
        if self.local:
            return nullcontext()
        return hub_resolution(self.name, self.checkpoint["name"], self.source, self._hub_revision)

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer (loaded on first use)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            with self._resolving():
                self._tokenizer = AutoTokenizer.from_pretrained(self.source, **self._load_kwargs())
        return self._tokenizer

    @property
    def sharded(self) -> bool:
        """Whether the weights are spread over the job's GPUs (`gpu` > 1 on a CUDA device)."""
        return int(self.spec["gpu"]) > 1 and self.device.startswith("cuda")

    def from_pretrained_kwargs(self, gpu_bytes: Sequence[int] | None = None) -> dict:
        """Keyword arguments of the base model's `from_pretrained`. A sharded model
        (`sharded`) is placed by accelerate (`device_map="auto"`) over the job's GPUs, each
        filled to GPU_MEMORY_FRACTION of `gpu_bytes` (default: the visible devices' total
        memory), in bfloat16 unless the config asks for float16."""
        import torch

        dtype = "auto" if self.dtype_name == "auto" else getattr(torch, self.dtype_name)
        kw = {"dtype": dtype, **self._load_kwargs()}
        if self.sharded:
            kw.update(shard_kwargs(self.name, int(self.spec["gpu"]), gpu_bytes))
        return kw

    @property
    def _base_key(self) -> tuple:
        """What makes two LMs' base weights the same copy (their adapters may differ)."""
        if self._key is None:
            ident = self._identity(with_adapter=False)
            self._key = (ident["model_id"], ident["revision"], self.gguf_file, self.dtype_name,
                         self.device, self.sharded, bool(self.spec.get("trust_remote_code")))
        return self._key

    @property
    def model(self):
        """The base model in eval mode with this LM's adapter active (none: adapters off).
        LMs of one base checkpoint share one resident copy of its weights (`_ResidentBase`)."""
        if self._base is None or self._base.model is None:  # not yet used, or released
            self._base = _RESIDENT.get(self._base_key)
        if self._base is None:
            from transformers import AutoModelForCausalLM

            free_memory()  # what earlier released LMs left behind, before the next load
            with self._resolving():
                model = AutoModelForCausalLM.from_pretrained(self.source, **self.from_pretrained_kwargs())
            track_base(model)
            if not self.sharded:
                model.to(self.device)
            self._base = _RESIDENT[self._base_key] = _ResidentBase(model.eval(), self.sharded, self.device)
        base = self._base
        if self.adapter is None:
            return base.activate(None, None)
        if self._adapter_name is None:
            self._adapter_name = "a" + hash_files(self.adapter)[:16]
        return base.activate(self.adapter, self._adapter_name)

    def unload_adapter(self) -> None:
        """Drop this LM's adapter from the shared base (the base stays resident)."""
        if self._base is not None and self._base.model is not None and self._adapter_name is not None:
            self._base.drop(self._adapter_name)

    def release(self) -> None:
        """Free the base weights this LM uses (with every adapter on them) for every LM of
        this base; the next call of any of them loads it again. (Without `release` the
        weights go when the last LM of the base does.)"""
        base = self._base or _RESIDENT.get(self._base_key)
        if base is not None:
            base.model = None
            _RESIDENT.pop(self._base_key, None)
            self._base = None
            free_memory()

    # ---- tokenisation helpers ----------------------------------------------------------
    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        for tid in (tok.pad_token_id, tok.eos_token_id, 0):
            if tid is not None:
                return int(tid)
        return 0

    @property
    def eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gen_cfg = getattr(self.model, "generation_config", None)
        cand = [getattr(gen_cfg, "eos_token_id", None), self.tokenizer.eos_token_id]
        for c in cand:
            if isinstance(c, int):
                ids.add(c)
            elif isinstance(c, (list, tuple)):
                ids.update(int(x) for x in c)
        return ids

    @property
    def max_length(self) -> int | None:
        if "max_length" in self.spec:
            return int(self.spec["max_length"])
        cfg = self.model.config
        for attr in ("max_position_embeddings", "n_positions", "n_ctx"):
            v = getattr(cfg, attr, None)
            if isinstance(v, int):
                return v
        return None

    def _use_chat(self, chat: bool) -> bool:
        use = bool(chat) or self.chat_default
        if use and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"model {self.name!r}: chat=True but the tokenizer of "
                             f"{self.source!r} has no chat template")
        return use

    def render(self, prompt: str, *, chat: bool, system: str | None = None) -> str:
        """The text the model sees: `prompt` itself, or with `chat` the user turn of the chat
        template (plus `system`) followed by the assistant generation prompt."""
        if not chat:
            if system is not None:
                raise ValueError(f"model {self.name!r}: a system prompt needs chat=True")
            return prompt
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        messages.append({"role": "user", "content": prompt})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  **self.spec.get("chat_template_kwargs", {}))

    def encode(self, text: str, *, chat: bool) -> list[int]:
        # a rendered chat template already holds its special tokens (BOS etc.)
        return list(self.tokenizer(text, add_special_tokens=not chat)["input_ids"])

    def _check_length(self, n: int, what: str) -> None:
        ml = self.max_length
        if ml is not None and n > ml:
            raise ValueError(f"model {self.name!r}: {what} needs {n} tokens, more than the "
                             f"model's maximum {ml}")

    def _batches(self, order: Sequence[int]):
        for s in range(0, len(order), self.batch_size):
            yield list(order[s:s + self.batch_size])

    # ---- generate ----------------------------------------------------------------------
    def generate(self, prompts, *, max_new_tokens, stop=None, chat=False, system=None,
                 temperature=0.0, sample_index=0, json_schemas=None):
        prompts = list(prompts)
        stop = list(stop or [])
        use_chat = self._use_chat(chat)
        schemas = constrained_schemas(prompts, json_schemas, self.structured_output)
        params = {"max_new_tokens": int(max_new_tokens), "stop": stop, "chat": use_chat,
                  "system": system, "temperature": float(temperature)}
        payloads = [{"prompt": p} for p in prompts]
        if schemas is not None:  # a constrained reply is another request (schema in its key)
            from selfknow.models.json_constraint import schema_regex

            for payload, schema in zip(payloads, schemas):
                schema_regex(schema)  # an unsupported schema fails before any model call
                payload["json_schema"] = schema

        def compute(idx: list[int]) -> list[dict]:
            texts = [self.render(prompts[i], chat=use_chat, system=system) for i in idx]
            ids = [self.encode(t, chat=use_chat) for t in texts]
            for j, x in enumerate(ids):
                self._check_length(len(x) + max_new_tokens, f"prompt {idx[j]}")
            return self._generate_ids(ids, max_new_tokens, stop, float(temperature),
                                      [(prompts[i], sample_index) for i in idx],
                                      None if schemas is None else [schemas[i] for i in idx])

        out = self._calls.run("generate", payloads, params, compute, sample_index=sample_index)
        return [Generation(**o) for o in out]

    def _generate_ids(self, ids: list[list[int]], max_new_tokens: int, stop: list[str],
                      temperature: float, seeds: list[tuple[str, int]],
                      schemas: list[dict] | None = None) -> list[dict]:
        import torch
        from transformers import GenerationConfig

        model, tok = self.model, self.tokenizer
        eos = sorted(self.eos_ids)
        # explicit values: generate() fills every unset (None) field from the checkpoint's
        # generation_config.json, which may carry a repetition penalty or top-p we must not use
        cfg = dict(max_new_tokens=max_new_tokens, num_beams=1, pad_token_id=self.pad_id,
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
        for group in self._batches(order):
            width = max(len(ids[i]) for i in group)
            inp = torch.full((len(group), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for r, i in enumerate(group):  # left padding: every prompt ends at the same column
                inp[r, width - len(ids[i]):] = torch.tensor(ids[i])
                mask[r, width - len(ids[i]):] = 1
            processors = []
            if schemas is not None:  # before the sampler, which draws from what it leaves
                from selfknow.models.json_constraint import SchemaLogitsProcessor

                processors.append(SchemaLogitsProcessor(
                    self._enforcer_data, [schemas[i] for i in group], width, eos))
            if temperature > 0:
                processors.append(_SeededSampler(temperature, [seeds[i] for i in group]))
            extra = {"logits_processor": processors} if processors else {}
            with torch.inference_mode():
                out = model.generate(input_ids=inp.to(model.device),
                                     attention_mask=mask.to(model.device),
                                     generation_config=gen_cfg, tokenizer=tok, **extra)
            for r, i in enumerate(group):
                gen = out[r, width:].tolist()
                results[i] = self._finish(gen, len(ids[i]), stop)
        return results  # type: ignore[return-value]

    @property
    def _enforcer_data(self):
        """lm-format-enforcer's table of this tokenizer (built on first use, ~1.5 s for a
        49k vocabulary)."""
        if not hasattr(self, "_enforcer_data_cache"):
            from selfknow.models.json_constraint import enforcer_tokenizer_data

            vocab = int(self.model.config.get_text_config().vocab_size)
            self._enforcer_data_cache = enforcer_tokenizer_data(self.tokenizer, vocab,
                                                                self.eos_ids)
        return self._enforcer_data_cache

    def _finish(self, gen: list[int], n_in: int, stop: list[str]) -> dict:
        """Cut generated ids at the first EOS or stop string: text (before the stop), and the
        number of tokens the model produced up to and including the stopping token."""
        tok, eos = self.tokenizer, self.eos_ids
        cut = next((k + 1 for k, t in enumerate(gen) if t in eos), None)
        span = gen if cut is None else gen[:cut]
        text = tok.decode(span, skip_special_tokens=True)
        pos = _first_stop(text, stop)
        if pos >= 0:
            # smallest prefix whose text holds a stop (monotone in the prefix length)
            lo, hi = 1, len(span)
            while lo < hi:
                mid = (lo + hi) // 2
                if _first_stop(tok.decode(span[:mid], skip_special_tokens=True), stop) >= 0:
                    hi = mid
                else:
                    lo = mid + 1
            return {"text": text[:pos], "tokens_in": n_in, "tokens_out": lo,
                    "finish_reason": "stop"}
        if cut is not None:
            return {"text": text, "tokens_in": n_in, "tokens_out": cut, "finish_reason": "stop"}
        return {"text": text, "tokens_in": n_in, "tokens_out": len(gen),
                "finish_reason": "length"}

    # ---- beam search -------------------------------------------------------------------
    def beam_search(self, prompts, *, num_beams, max_new_tokens, stop=("\n",)):
        prompts = list(prompts)
        stop = list(stop)
        use_chat = self._use_chat(False)
        params = {"num_beams": int(num_beams), "max_new_tokens": int(max_new_tokens),
                  "stop": stop, "chat": use_chat}

        def compute(idx: list[int]) -> list[list[dict]]:
            ids = [self.encode(self.render(prompts[i], chat=use_chat), chat=use_chat)
                   for i in idx]
            for i, x in zip(idx, ids):
                self._check_length(len(x) + max_new_tokens, f"prompt {i}")
            done: dict[int, list[dict]] = {}
            try:
                for group in self._beam_groups(ids):
                    beams = self._beam_search_group([ids[j] for j in group], int(num_beams),
                                                    int(max_new_tokens), stop)
                    for j, bs in zip(group, beams):
                        done[j] = [{"text": b["text"], "logprob": b["logprob"]} for b in bs]
            except Exception as err:  # finished groups are still cached
                if done:
                    raise PartialFailure(done, err) from err
                raise
            return [done[j] for j in range(len(idx))]

        out = self._calls.run("beam_search", [{"prompt": p} for p in prompts], params, compute)
        return [[Beam(**b) for b in beams] for beams in out]

    def beam_search_ids(self, prompt_ids: list[int], *, num_beams: int, max_new_tokens: int,
                        stop: Sequence[str] = ("\n",)) -> list[dict]:
        """Beam search from the token ids of one prompt (uncached); see `beam_search_batch`."""
        return self.beam_search_batch([prompt_ids], num_beams=num_beams,
                                      max_new_tokens=max_new_tokens, stop=stop)[0]

    def beam_search_batch(self, prompt_ids: Sequence[list[int]], *, num_beams: int,
                          max_new_tokens: int, stop: Sequence[str] = ("\n",)
                          ) -> list[list[dict]]:
        """Beam search from the token ids of each prompt (uncached), `batch_size` prompts per
        forward pass. For each prompt: the `num_beams` best finished beams, best first, each
        {"ids": generated token ids up to and including the token that completed the stop (or
        EOS), "text": decoded text cut before the stop, "logprob": sum of the log-probabilities
        of `ids`, "finish_reason"}.

        A hypothesis finishes when its text contains a stop string or it emits EOS; a prompt's
        search ends when `num_beams` hypotheses have finished and none still running scores
        higher (log-probabilities only decrease, so none can catch up: the result is exact for
        the beam width), or at `max_new_tokens`, when the running beams finish with "length".
        Fewer than `num_beams` beams come back only when fewer distinct continuations exist.
        """
        prompt_ids = [list(x) for x in prompt_ids]
        out: list[list[dict] | None] = [None] * len(prompt_ids)
        for group in self._beam_groups(prompt_ids):
            res = self._beam_search_group([prompt_ids[j] for j in group], int(num_beams),
                                          int(max_new_tokens), list(stop))
            for j, beams in zip(group, res):
                out[j] = beams
        return out  # type: ignore[return-value]

    def _beam_groups(self, ids: Sequence[list[int]]) -> list[list[int]]:
        """Batches of prompt indices, longest first (little padding). Left padding needs
        explicit position ids; a model whose forward takes none is run one prompt at a time."""
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        if not self._takes_position_ids:
            return [[i] for i in order]
        return list(self._batches(order))

    @property
    def _takes_position_ids(self) -> bool:
        return "position_ids" in forward_params(self.model)

    def _decode_many(self, seqs: list[list[int]]) -> list[str]:
        """`tokenizer.decode(s, skip_special_tokens=True)` for each sequence, in one call into
        the Rust tokenizer when that is the same (no post-decode space clean-up)."""
        tok = self.tokenizer
        backend = getattr(tok, "_tokenizer", None)
        if backend is not None and hasattr(backend, "decode_batch") \
                and not getattr(tok, "clean_up_tokenization_spaces", False):
            return backend.decode_batch(seqs, skip_special_tokens=True)
        return [tok.decode(s, skip_special_tokens=True) for s in seqs]

    @property
    def _byte_table(self) -> list[bytes] | None:
        """Bytes of each token id under `decode(..., skip_special_tokens=True)` (b"" for
        skipped special tokens) when the tokenizer's decoder is plain byte-level (GPT-2, OLMo,
        SmolLM2), else None; checked token by token against the tokenizer when built. The beam
        search decodes every candidate (prompts x 2 x num_beams^2 per step); joining bytes
        and decoding them in Python (what a byte-level decoder does, U+FFFD for invalid
        UTF-8) is ~20x faster than the tokenizer's decode of each sequence."""
        if not hasattr(self, "_byte_table_cache"):
            self._byte_table_cache = _byte_level_table(self.tokenizer)
        return self._byte_table_cache

    @property
    def _last_logits_only(self) -> dict:
        """`logits_to_keep=1` where the model takes it: the prefill then skips the LM head
        for all but the last position (a vocabulary-sized matmul per prompt token)."""
        return {"logits_to_keep": 1} if "logits_to_keep" in forward_params(self.model) else {}

    @property
    def _shared_prefix_ok(self) -> bool:
        """Whether beam steps may use `_shared_prefix_attention`: the model runs plain SDPA
        or eager softmax attention (no sliding window, no logit soft-capping), its attention
        can be switched (`set_attn_implementation` only warns for a model whose attention
        does not go through transformers' AttentionInterface) and it takes position ids (the
        per-beam cache no longer tells it the positions)."""
        cfg = self.model.config.get_text_config()
        return (self._takes_position_ids
                and _base_class(self.model)._can_set_attn_implementation()
                and getattr(cfg, "_attn_implementation", None) in ("sdpa", "eager")
                and getattr(cfg, "sliding_window", None) is None
                and getattr(cfg, "attn_logit_softcapping", None) is None)

    def _beam_search_group(self, prompt_ids: list[list[int]], k: int, max_new_tokens: int,
                           stop: list[str], shared_prefix: bool | None = None
                           ) -> list[list[dict]]:
        """Beam search for a batch of prompts (`_BeamSearch`): a left-padded prefill, then one
        forward step per token over `k` rows for every unfinished prompt, the KV cache rows
        re-selected by each new beam's origin. The per-prompt bookkeeping is the one-prompt
        algorithm of `beam_search_batch`, run on each prompt's slice of the step.

        With `shared_prefix` (default: when the attention allows it) a prompt's KV is kept
        once rather than once per beam and only generated tokens are cached per beam: the
        full per-beam cache made every step copy prompt-length KV for all rows twice
        (re-selection and append), which dominated the time."""
        import torch

        if shared_prefix is None:
            shared_prefix = self._shared_prefix_ok
        search = _BeamSearch(self, prompt_ids, k, stop, shared_prefix)
        if max_new_tokens > 0:
            with torch.inference_mode():
                search.run(max_new_tokens)
        return search.final_beams()

    # ---- scoring -----------------------------------------------------------------------
    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval-harness's split: trailing spaces of the context move to the continuation;
        context+continuation is tokenised jointly and split after len(tokenise(context)), so
        the continuation is scored with the tokens the model would really produce."""
        n_space = len(context) - len(context.rstrip(" "))
        if n_space:
            continuation = context[-n_space:] + continuation
            context = context[:-n_space]
        whole = self.encode(context + continuation, chat=False)
        if context:
            n_ctx = len(self.encode(context, chat=False))
            return whole[:n_ctx], whole[n_ctx:]
        # empty context: condition on BOS (or EOS), as the harness does
        start = self.tokenizer.bos_token_id
        if start is None:
            start = self.tokenizer.eos_token_id
        if start is None:
            raise ValueError(f"model {self.name!r}: empty context and no BOS/EOS token")
        cont = self.encode(continuation, chat=False)
        if cont and cont[0] == start:
            cont = cont[1:]
        return [int(start)], cont

    def _token_logprobs(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """For each sequence, log p(token t | tokens < t) for t = 1..len-1 (right padding)."""
        import torch

        model = self.model
        out: list[np.ndarray | None] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        for group in self._batches(order):
            width = max(len(seqs[i]) for i in group)
            inp = torch.full((len(group), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for r, i in enumerate(group):
                inp[r, :len(seqs[i])] = torch.tensor(seqs[i])
                mask[r, :len(seqs[i])] = 1
            with torch.inference_mode():
                logits = model(input_ids=inp.to(model.device),
                               attention_mask=mask.to(model.device)).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            tgt = inp[:, 1:].to(logp.device)
            lp = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).cpu().numpy()
            for r, i in enumerate(group):
                out[i] = lp[r, :len(seqs[i]) - 1].astype(np.float64)
        return out  # type: ignore[return-value]

    def loglikelihood(self, pairs):
        pairs = [(str(c), str(x)) for c, x in pairs]

        def compute(idx: list[int]) -> list[float]:
            seqs, n_cont = [], []
            for i in idx:
                ctx, cont = self._encode_pair(*pairs[i])
                if not cont:
                    raise ValueError(f"model {self.name!r}: pair {i} has an empty "
                                     f"continuation {pairs[i][1]!r}")
                self._check_length(len(ctx) + len(cont) - 1, f"pair {i}")
                seqs.append(ctx + cont)
                n_cont.append(len(cont))
            lps = self._token_logprobs(seqs)
            return [float(lp[-n:].sum()) for lp, n in zip(lps, n_cont)]

        payloads = [{"context": c, "continuation": x} for c, x in pairs]
        return self._calls.run("loglikelihood", payloads, {}, compute)

    def candidate_ids(self, candidates: Sequence[str]) -> list[int]:
        """Token id of each single-token candidate string; error if one is not one token."""
        ids = []
        for c in candidates:
            enc = self.tokenizer(c, add_special_tokens=False)["input_ids"]
            if len(enc) != 1:
                pieces = self.tokenizer.convert_ids_to_tokens(enc)
                raise ValueError(f"model {self.name!r}: candidate {c!r} is not a single token "
                                 f"(tokenises to {pieces})")
            ids.append(int(enc[0]))
        return ids

    def next_token_logprobs(self, prompts, candidates, *, chat=False):
        prompts, candidates = list(prompts), list(candidates)
        use_chat = self._use_chat(chat)
        cand_ids = self.candidate_ids(candidates)

        def compute(idx: list[int]) -> list[list[float]]:
            import torch

            seqs = [self.encode(self.render(prompts[i], chat=use_chat), chat=use_chat)
                    for i in idx]
            res: list[list[float] | None] = [None] * len(idx)
            order = sorted(range(len(seqs)), key=lambda j: -len(seqs[j]))
            for group in self._batches(order):
                width = max(len(seqs[j]) for j in group)
                self._check_length(width, f"prompt {idx[group[0]]}")
                inp = torch.full((len(group), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(group), width), dtype=torch.long)
                for r, j in enumerate(group):
                    inp[r, :len(seqs[j])] = torch.tensor(seqs[j])
                    mask[r, :len(seqs[j])] = 1
                with torch.inference_mode():
                    last = last_position_logits(self.model, inp.to(self.model.device),
                                                mask.to(self.model.device), [len(seqs[j]) for j in group])
                lp = torch.log_softmax(last.float(), -1)
                sel = lp[:, cand_ids].cpu().numpy().astype(np.float64)
                for r, j in enumerate(group):
                    res[j] = sel[r].tolist()
            return res  # type: ignore[return-value]

        params = {"candidates": candidates, "chat": use_chat}
        out = self._calls.run("next_token_logprobs", [{"prompt": p} for p in prompts], params,
                              compute)
        return np.asarray(out, dtype=float).reshape(len(prompts), len(candidates))
