"""`hf` backend: local Hugging Face `transformers` causal LMs (SPEC §0.4).

A model comes from a hub id (+ a `revision` per checkpoint), a local dir (one dir per checkpoint)
or a GGUF file (`gguf_file=`, dequantised by transformers), optionally with a LoRA adapter dir
loaded with peft on top. All decoding is deterministic: greedy, or sampling seeded from
(prompt, sample index) so that a sample does not depend on its batch.

Beam search is our own loop (`_beam_search_one`) rather than `model.generate(num_beams=...)`:
persistent §3.1.1 needs every final beam cut at the first newline with the log-probability of
exactly its tokens up to that stop, and HF's beam scorer only stops hypotheses at EOS (its
`stop_strings` criterion ends the whole search) and reports length-normalised scores.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from selfknow.models.base import LM, Beam, CallStats, Generation
from selfknow.models.cache import CachedCalls, hash_files
from selfknow.models.registry import ModelSpecError, register_backend

log = logging.getLogger(__name__)

_SAMPLE_BYTES = 1 << 20  # fingerprint of local model files: size + first/last MiB


def _first_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest stop string in `text`, or -1."""
    hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(hits) if hits else -1


def _kv_cache(out):
    """The KV cache of a forward output: `cache` from transformers 5.2x, else
    `past_key_values`."""
    return out["cache"] if "cache" in out else out["past_key_values"]


@register_backend("hf")
class HFLM(LM):
    """A transformers causal LM at one checkpoint (see module docstring)."""

    def __init__(self, spec: dict, checkpoint: dict, *, cache_dir=None, adapter=None):
        self.spec, self.checkpoint = spec, checkpoint
        self.name = spec["name"]
        self.stats = CallStats()
        self.batch_size = int(spec.get("batch_size", 8))
        self.chat_default = bool(spec.get("chat", False))
        self.dtype_name = spec.get("dtype", "float32")
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
        self._model = None
        self._tokenizer = None
        self._calls = CachedCalls(cache_dir, self._identity, self.stats)

    # ---- identity and lazy loading -----------------------------------------------------
    def _identity(self) -> dict:
        """What makes this model's answers what they are: for local dirs a content
        fingerprint (so a retrained model misses), for the hub the revision; plus the dtype,
        GGUF file and adapter (path + full content hash of its weights)."""
        if self.local:
            target = Path(self.source) / self.gguf_file if self.gguf_file else Path(self.source)
            revision = f"{self.checkpoint['name']}@{hash_files(target, sample_bytes=_SAMPLE_BYTES)}"
        else:
            revision = self._hub_revision or "main"
        adapter = None
        if self.adapter is not None:
            adapter = {"path": self.adapter, "sha256": hash_files(self.adapter)}
        return {"backend": "hf", "model_id": self.model_id, "revision": revision,
                "gguf_file": self.gguf_file, "dtype": self.dtype_name, "adapter": adapter}

    @property
    def device(self) -> str:
        dev = self.spec.get("device", "cpu")
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

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer (loaded on first use)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.source, **self._load_kwargs())
        return self._tokenizer

    @property
    def model(self):
        """The model (with the adapter applied, if any), in eval mode on `device`."""
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            dtype = {"auto": "auto", "float32": torch.float32, "float16": torch.float16,
                     "bfloat16": torch.bfloat16}[self.dtype_name]
            model = AutoModelForCausalLM.from_pretrained(self.source, dtype=dtype,
                                                         **self._load_kwargs())
            if self.adapter is not None:
                from peft import PeftModel

                model = PeftModel.from_pretrained(model, self.adapter)
            model.to(self.device)
            model.eval()
            self._model = model
        return self._model

    @property
    def _cache_kwarg(self) -> str:
        """Name of the forward argument taking the KV cache (renamed in transformers 5.2x)."""
        import inspect

        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") \
            else self.model
        return "cache" if "cache" in inspect.signature(base.forward).parameters \
            else "past_key_values"

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
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)

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
                 temperature=0.0, sample_index=0):
        prompts = list(prompts)
        stop = list(stop or [])
        use_chat = self._use_chat(chat)
        params = {"max_new_tokens": int(max_new_tokens), "stop": stop, "chat": use_chat,
                  "system": system, "temperature": float(temperature)}
        payloads = [{"prompt": p} for p in prompts]

        def compute(idx: list[int]) -> list[dict]:
            texts = [self.render(prompts[i], chat=use_chat, system=system) for i in idx]
            ids = [self.encode(t, chat=use_chat) for t in texts]
            for j, x in enumerate(ids):
                self._check_length(len(x) + max_new_tokens, f"prompt {idx[j]}")
            return self._generate_ids(ids, max_new_tokens, stop, float(temperature),
                                      [(prompts[i], sample_index) for i in idx])

        out = self._calls.run("generate", payloads, params, compute, sample_index=sample_index)
        return [Generation(**o) for o in out]

    def _generate_ids(self, ids: list[list[int]], max_new_tokens: int, stop: list[str],
                      temperature: float, seeds: list[tuple[str, int]]) -> list[dict]:
        import torch
        from transformers import GenerationConfig

        model, tok = self.model, self.tokenizer
        eos = sorted(self.eos_ids)
        # explicit values: generate() fills every unset (None) field from the checkpoint's
        # generation_config.json, which may carry a repetition penalty or top-p we must not use
        cfg = dict(max_new_tokens=max_new_tokens, num_beams=1, pad_token_id=self.pad_id,
                   eos_token_id=eos or None, repetition_penalty=1.0, no_repeat_ngram_size=0,
                   min_new_tokens=0)
        if temperature > 0:
            cfg.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
        else:
            cfg.update(do_sample=False)
        if stop:
            cfg["stop_strings"] = stop
        gen_cfg = GenerationConfig(**cfg)
        results: list[dict | None] = [None] * len(ids)
        if temperature > 0:
            # one prompt at a time, seeded from (prompt, sample index): batch-independent
            groups = [[i] for i in range(len(ids))]
        else:
            order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
            groups = list(self._batches(order))
        for group in groups:
            width = max(len(ids[i]) for i in group)
            inp = torch.full((len(group), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for r, i in enumerate(group):  # left padding: every prompt ends at the same column
                inp[r, width - len(ids[i]):] = torch.tensor(ids[i])
                mask[r, width - len(ids[i]):] = 1
            with torch.inference_mode(), torch.random.fork_rng(devices=[]):
                if temperature > 0:
                    p, k = seeds[group[0]]
                    digest = hashlib.sha256(f"{k}\0{p}".encode()).hexdigest()
                    torch.manual_seed(int(digest[:15], 16))
                out = model.generate(input_ids=inp.to(model.device),
                                     attention_mask=mask.to(model.device),
                                     generation_config=gen_cfg, tokenizer=tok)
            for r, i in enumerate(group):
                gen = out[r, width:].tolist()
                results[i] = self._finish(gen, len(ids[i]), stop)
        return results  # type: ignore[return-value]

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
            res = []
            for i in idx:
                ids = self.encode(self.render(prompts[i], chat=use_chat), chat=use_chat)
                self._check_length(len(ids) + max_new_tokens, f"prompt {i}")
                beams = self.beam_search_ids(ids, num_beams=num_beams,
                                             max_new_tokens=max_new_tokens, stop=stop)
                res.append([{"text": b["text"], "logprob": b["logprob"]} for b in beams])
            return res

        out = self._calls.run("beam_search", [{"prompt": p} for p in prompts], params, compute)
        return [[Beam(**b) for b in beams] for beams in out]

    def beam_search_ids(self, prompt_ids: list[int], *, num_beams: int, max_new_tokens: int,
                        stop: Sequence[str] = ("\n",)) -> list[dict]:
        """Beam search from token ids (uncached). Returns the `num_beams` best finished beams,
        best first, each {"ids": generated token ids up to and including the token that
        completed the stop (or EOS), "text": decoded text cut before the stop, "logprob":
        sum of the log-probabilities of `ids`, "finish_reason"}.

        A hypothesis finishes when its text contains a stop string or it emits EOS; the search
        ends when `num_beams` hypotheses have finished and none still running scores higher
        (log-probabilities only decrease, so none can catch up: the result is exact for the
        beam width), or at `max_new_tokens`, when the running beams finish with "length".
        """
        import torch

        model, tok, eos = self.model, self.tokenizer, self.eos_ids
        k = int(num_beams)
        vocab_k = min(2 * k, int(model.config.get_text_config().vocab_size))
        finished: list[dict] = []
        # running hypotheses: (generated ids, logprob); all share the prompt
        running: list[tuple[list[int], float]] = [([], 0.0)]
        dev = model.device
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([prompt_ids], device=dev), use_cache=True)
            past, logits = _kv_cache(out), out.logits[:, -1, :]
            for step in range(max_new_tokens):
                logp = torch.log_softmax(logits.float(), dim=-1)
                top_lp, top_id = logp.topk(vocab_k, dim=-1)
                cands = []
                for b, (ids, score) in enumerate(running):
                    for lp, tid in zip(top_lp[b].tolist(), top_id[b].tolist()):
                        cands.append((score + lp, b, tid))
                cands.sort(key=lambda c: -c[0])
                nxt: list[tuple[list[int], float]] = []
                src: list[int] = []
                for score, b, tid in cands:
                    full = len(finished) >= k
                    if len(nxt) == k and (full and score <= finished[-1]["logprob"]):
                        break  # sorted: nothing later can run on or finish in the top k
                    ids = running[b][0] + [tid]
                    text = tok.decode(ids, skip_special_tokens=True)
                    pos = _first_stop(text, stop)
                    if tid in eos or pos >= 0:
                        if len(finished) < k or score > finished[-1]["logprob"]:
                            finished.append({"ids": ids, "text": text if pos < 0 else
                                             text[:pos], "logprob": score,
                                             "finish_reason": "stop"})
                            finished.sort(key=lambda f: -f["logprob"])
                            del finished[k:]
                    elif len(nxt) < k:
                        nxt.append((ids, score))
                        src.append(b)
                if not nxt:
                    running = []
                    break
                if len(finished) >= k and nxt[0][1] <= finished[-1]["logprob"]:
                    running = []
                    break
                running = nxt
                if step == max_new_tokens - 1:
                    break
                past.reorder_cache(torch.tensor(src, device=dev))
                last = torch.tensor([[ids[-1]] for ids, _ in running], device=dev)
                out = model(input_ids=last, use_cache=True, **{self._cache_kwarg: past})
                past, logits = _kv_cache(out), out.logits[:, -1, :]
        for ids, score in running:
            finished.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                             "logprob": score, "finish_reason": "length"})
        finished.sort(key=lambda f: -f["logprob"])
        return finished[:k]

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
                    logits = self.model(input_ids=inp.to(self.model.device),
                                        attention_mask=mask.to(self.model.device)).logits
                last = torch.tensor([len(seqs[j]) - 1 for j in group], device=logits.device)
                lp = torch.log_softmax(logits[torch.arange(len(group)), last].float(), -1)
                sel = lp[:, cand_ids].cpu().numpy().astype(np.float64)
                for r, j in enumerate(group):
                    res[j] = sel[r].tolist()
            return res  # type: ignore[return-value]

        params = {"candidates": candidates, "chat": use_chat}
        out = self._calls.run("next_token_logprobs", [{"prompt": p} for p in prompts], params,
                              compute)
        return np.asarray(out, dtype=float).reshape(len(prompts), len(candidates))
