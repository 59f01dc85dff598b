"""The `hf` backend's LM: a transformers causal LM at one checkpoint (SPEC §0.4).

A model comes from a hub id (+ a `revision` per checkpoint), a local dir (one dir per checkpoint)
or a GGUF file (`gguf_file=`, dequantised by transformers), optionally with a LoRA adapter dir
loaded with peft on top; its weights are shared with the other LMs of its base checkpoint
(`loading`). Its calls go through the request cache (`CachedCalls`) and compute the misses
with `generation`, `beam` and `scoring`.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from selfknow.config import is_chat
from selfknow.models.base import LM, Beam, CallStats, Generation, constrained_schemas, structured_output
from selfknow.models.cache import CachedCalls, PartialFailure, hash_files
from selfknow.models.hf import beam, generation, scoring
from selfknow.models.hf.compat import byte_level_table
from selfknow.models.hf.loading import (ResidentBase, hub_resolution, release_base, resident_base,
                                        shard_kwargs)
from selfknow.models.registry import ModelSpecError, register_backend, track_base

_SAMPLE_BYTES = 1 << 20  # fingerprint of local model files: size + first/last MiB


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
        self._base: ResidentBase | None = None
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
        filled to `loading.GPU_MEMORY_FRACTION` of `gpu_bytes` (default: the visible devices' total
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

    def _load_base(self) -> ResidentBase:
        from transformers import AutoModelForCausalLM

        with self._resolving():
            model = AutoModelForCausalLM.from_pretrained(self.source, **self.from_pretrained_kwargs())
        track_base(model)
        if not self.sharded:
            model.to(self.device)
        return ResidentBase(model.eval(), self.sharded, self.device)

    @property
    def model(self):
        """The base model in eval mode with this LM's adapter active (none: adapters off).
        LMs of one base checkpoint share one resident copy of its weights (`ResidentBase`)."""
        if self._base is None or self._base.model is None:  # not yet used, or released
            self._base = resident_base(self._base_key, self._load_base)
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
        release_base(self._base_key, self._base)
        self._base = None

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

    def check_length(self, n: int, what: str) -> None:
        """Error naming `what` when `n` tokens exceed the model's context."""
        ml = self.max_length
        if ml is not None and n > ml:
            raise ValueError(f"model {self.name!r}: {what} needs {n} tokens, more than the "
                             f"model's maximum {ml}")

    def batches(self, order: Sequence[int]):
        """`order` in runs of `batch_size` (the prompts of one forward pass)."""
        for s in range(0, len(order), self.batch_size):
            yield list(order[s:s + self.batch_size])

    @property
    def byte_table(self) -> list[bytes] | None:
        """Each token's bytes where the tokenizer is byte-level (`compat.byte_level_table`),
        built on first use: the beam search decodes every candidate (prompts x 2 x
        num_beams^2 per step) by joining them."""
        if not hasattr(self, "_byte_table_cache"):
            self._byte_table_cache = byte_level_table(self.tokenizer)
        return self._byte_table_cache

    @property
    def enforcer_data(self):
        """lm-format-enforcer's table of this tokenizer (built on first use, ~1.5 s for a
        49k vocabulary)."""
        if not hasattr(self, "_enforcer_data_cache"):
            from selfknow.models.json_constraint import enforcer_tokenizer_data

            vocab = int(self.model.config.get_text_config().vocab_size)
            self._enforcer_data_cache = enforcer_tokenizer_data(self.tokenizer, vocab,
                                                                self.eos_ids)
        return self._enforcer_data_cache

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
                self.check_length(len(x) + max_new_tokens, f"prompt {idx[j]}")
            return generation.generate_ids(self, ids, max_new_tokens, stop, float(temperature),
                                           [(prompts[i], sample_index) for i in idx],
                                           None if schemas is None else [schemas[i] for i in idx])

        out = self._calls.run("generate", payloads, params, compute, sample_index=sample_index)
        return [Generation(**o) for o in out]

    # ---- beam search -------------------------------------------------------------------
    def beam_search(self, prompts, *, num_beams, max_new_tokens, stop=("\n",)):
        prompts = list(prompts)
        stop = list(stop)
        use_chat = self._use_chat(False)
        # "rules": beams cached before the search took generate's rules (and kept no raw
        # text) are not these beams
        params = {"num_beams": int(num_beams), "max_new_tokens": int(max_new_tokens),
                  "stop": stop, "chat": use_chat, "rules": "generate"}

        def compute(idx: list[int]) -> list[list[dict]]:
            ids = [self.encode(self.render(prompts[i], chat=use_chat), chat=use_chat)
                   for i in idx]
            for i, x in zip(idx, ids):
                self.check_length(len(x) + max_new_tokens, f"prompt {i}")
            done: dict[int, list[dict]] = {}
            try:
                for group in beam.beam_groups(self, ids):
                    beams = beam.search_group(self, [ids[j] for j in group], int(num_beams),
                                              int(max_new_tokens), stop)
                    for j, bs in zip(group, beams):
                        done[j] = [{"text": b["text"], "logprob": b["logprob"], "raw": b["raw"]} for b in bs]
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
        forward pass (`beam`). For each prompt: the `num_beams` best finished beams, best
        first, each {"ids": generated token ids up to and including the token that completed
        the stop (or EOS), "text": decoded text cut before the stop, "raw": decoded text uncut,
        "logprob": sum of the log-probabilities of `ids`, "finish_reason"}.

        A hypothesis finishes when its text contains a stop string or it emits EOS and it ranks
        among the step's first `num_beams` candidates (transformers' `generate` rules, `beam`);
        a prompt's search ends when `num_beams` hypotheses have finished and none still running scores
        higher (log-probabilities only decrease, so none can catch up: the result is exact for
        the beam width), or at `max_new_tokens`, when the running beams finish with "length".
        Fewer than `num_beams` beams come back only when fewer distinct continuations exist.
        """
        prompt_ids = [list(x) for x in prompt_ids]
        out: list[list[dict] | None] = [None] * len(prompt_ids)
        for group in beam.beam_groups(self, prompt_ids):
            res = beam.search_group(self, [prompt_ids[j] for j in group], int(num_beams),
                                    int(max_new_tokens), list(stop))
            for j, beams in zip(group, res):
                out[j] = beams
        return out  # type: ignore[return-value]

    # ---- scoring -----------------------------------------------------------------------
    def loglikelihood(self, pairs):
        pairs = [(str(c), str(x)) for c, x in pairs]

        def compute(idx: list[int]) -> list[float]:
            seqs, n_cont = [], []
            for i in idx:
                ctx, cont = scoring.encode_pair(self, *pairs[i])
                if not cont:
                    raise ValueError(f"model {self.name!r}: pair {i} has an empty "
                                     f"continuation {pairs[i][1]!r}")
                self.check_length(len(ctx) + len(cont) - 1, f"pair {i}")
                seqs.append(ctx + cont)
                n_cont.append(len(cont))
            lps = scoring.token_logprobs(self, seqs)
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
            seqs = [self.encode(self.render(prompts[i], chat=use_chat), chat=use_chat)
                    for i in idx]
            return scoring.candidate_logprobs(self, seqs, cand_ids, idx)

        params = {"candidates": candidates, "chat": use_chat}
        out = self._calls.run("next_token_logprobs", [{"prompt": p} for p in prompts], params,
                              compute)
        return np.asarray(out, dtype=float).reshape(len(prompts), len(candidates))
