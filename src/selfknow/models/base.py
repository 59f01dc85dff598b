"""The one model interface every stage calls (SPEC §0.4).

Backends (`hf`, `openai`, ...) implement `LM` and register themselves by name in
`selfknow.models.registry`. Every call type takes a batch; backends batch internally and every
call goes through the disk request cache, so a rerun costs no model calls.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Generation:
    """One decoded continuation. `tokens_in`/`tokens_out` feed cost accounting (LCAE CE).
    `finish_reason`: "stop" (a stop string, EOS or the end of the answer), "length" (cut at
    `max_new_tokens`: callers count it, never read it as a finished answer) or
    "content_filter" (a provider withheld it)."""

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Beam:
    """One beam of a beam search: its text (cut at the stop), sequence log-probability (sum of
    the log-probabilities of its generated tokens up to the stop) and `raw`, its decoded
    tokens uncut (the stopping token whole; None where a backend gives no tokens)."""

    text: str
    logprob: float
    raw: str | None = None


@dataclass
class CallStats:
    """Counts of what a model object did: cache hits, misses (= real model calls)."""

    hits: int = 0
    misses: int = 0
    extra: dict = field(default_factory=dict)


#: protocol stages whose generation budget (max new tokens) a model entry may set in
#: `token_budgets`, each looked up with `LM.budget` where the stage generates
BUDGET_STAGES = ("ladder_answer", "lcae_stage1", "lcae_stage2", "judge")


def structured_output(spec: Mapping) -> bool:
    """Whether a model entry constrains replies to the JSON schemas it is given: its
    `structured_output` key, else the config schema's default for it."""
    if "structured_output" in spec:
        return bool(spec["structured_output"])
    from selfknow.schema import subschema

    return bool(subschema("models.*.structured_output")["default"])


def constrained_schemas(prompts: Sequence[str], json_schemas: Sequence[dict] | None,
                        enabled: bool) -> list[dict] | None:
    """The per-prompt schemas a backend constrains `generate` with: None when the caller
    gives none or the model entry has `structured_output` off."""
    if json_schemas is None:
        return None
    if len(json_schemas) != len(prompts):
        raise ValueError(f"generate: {len(json_schemas)} JSON schemas for {len(prompts)} prompts "
                         f"(one per prompt)")
    return [dict(s) for s in json_schemas] if enabled else None


class LogprobsUnavailable(RuntimeError):
    """The backend/server cannot give the log-probabilities a method needs."""


class LM(abc.ABC):
    """A language model at one checkpoint (and optional LoRA adapter)."""

    #: registry name of the backend, model id, revision and adapter: all part of cache keys
    backend: str
    model_id: str
    revision: str | None
    adapter: str | None
    stats: CallStats
    #: whether a temperature-0 request gets the same answer every time (local greedy decoding);
    #: hosted APIs give no such promise, so their repeats are separate requests
    greedy_deterministic: bool = True
    #: the model entry's `token_budgets` (set by `load_lm`)
    token_budgets: Mapping[str, int] = MappingProxyType({})

    def identity(self) -> dict:
        """What makes this model's answers what they are, the model part of every request's
        cache key and of a resumable job's identity: backend, model id, revision (for local
        weights a fingerprint of their files), adapter and backend settings."""
        return {"backend": self.backend, "model_id": self.model_id, "revision": self.revision,
                "adapter": self.adapter}

    def budget(self, stage: str, default: int) -> int:
        """Max new tokens of protocol stage `stage` (one of BUDGET_STAGES) for this model: the
        model entry's `token_budgets[stage]`, else the stage's own `default`."""
        if stage not in BUDGET_STAGES:
            raise ValueError(f"unknown budget stage {stage!r}; known: {', '.join(BUDGET_STAGES)}")
        return int(self.token_budgets.get(stage, default))

    def together(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """The results of `calls` (calls of this model that need none of each other's
        answers), in order. A backend may send their requests at once: the openai backend
        with `batch: true` runs them all as one set of Batch API jobs."""
        return [call() for call in calls]

    def release(self) -> None:
        """Free the model weights this LM holds in the process (a later call loads them
        again), so that the job's next model does not sit beside them; a backend that holds
        none has nothing to free."""

    @abc.abstractmethod
    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        stop: Sequence[str] | None = None,
        chat: bool = False,
        system: str | None = None,
        temperature: float = 0.0,
        sample_index: int = 0,
        json_schemas: Sequence[dict] | None = None,
    ) -> list[Generation]:
        """Greedy (temperature 0) or sampled continuation of each prompt, cut at the first stop
        string. With `chat=True` the prompt is the user turn of the model's chat template.

        `json_schemas` (one JSON schema per prompt) asks for structured output: a backend
        whose model entry has `structured_output` on constrains the reply to its schema
        (see `structured_output`), any other returns free text; callers parse every reply and
        count the unparsable ones either way."""

    @abc.abstractmethod
    def beam_search(
        self,
        prompts: Sequence[str],
        *,
        num_beams: int,
        max_new_tokens: int,
        stop: Sequence[str] = ("\n",),
    ) -> list[list[Beam]]:
        """Every one of the `num_beams` final beams for each prompt with its sequence
        log-probability, best first (persistent §3.1.1 self-consistency)."""

    @abc.abstractmethod
    def loglikelihood(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Sum of log p(continuation tokens | context) for each (context, continuation)."""

    @abc.abstractmethod
    def next_token_logprobs(
        self, prompts: Sequence[str], candidates: Sequence[str], *, chat: bool = False
    ) -> np.ndarray:
        """(n_prompts, n_candidates) log-probabilities that the next token is each candidate
        (single-token strings such as "0".."9" or " A"); not renormalised over candidates."""
