"""The one model interface every stage calls (SPEC §0.4).

Backends (`hf`, `openai`, ...) implement `LM` and register themselves by name in
`selfknow.models.registry`. Every call type takes a batch; backends batch internally and every
call goes through the disk request cache, so a rerun costs no model calls.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Generation:
    """One decoded continuation. `tokens_in`/`tokens_out` feed cost accounting (LCAE CE)."""

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str = "stop"  # "stop" | "length"


@dataclass(frozen=True)
class Beam:
    """One beam of a beam search: its text (cut at the stop) and sequence log-probability
    (sum of the log-probabilities of its generated tokens up to the stop)."""

    text: str
    logprob: float


@dataclass
class CallStats:
    """Counts of what a model object did: cache hits, misses (= real model calls)."""

    hits: int = 0
    misses: int = 0
    extra: dict = field(default_factory=dict)


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
    ) -> list[Generation]:
        """Greedy (temperature 0) or sampled continuation of each prompt, cut at the first stop
        string. With `chat=True` the prompt is the user turn of the model's chat template."""

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
