"""A scripted fake backend for protocol unit tests: answers come from a table, not a model."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from selfknow.models.base import LM, Beam, CallStats, Generation


class ScriptedLM(LM):
    """`respond(prompt) -> str` (or `(text, finish_reason)`) drives `generate`; beams, log-likelihoods and next-token
    log-probabilities come from optional callables, defaulting to deterministic hashes."""

    backend = "scripted"

    def __init__(
        self,
        respond: Callable[[str], str],
        *,
        beams: Callable[[str], list[tuple[str, float]]] | None = None,
        loglik: Callable[[str, str], float] | None = None,
        next_token: Callable[[str, Sequence[str]], Sequence[float]] | None = None,
        model_id: str = "scripted",
    ):
        self.model_id, self.revision, self.adapter = model_id, None, None
        self.stats = CallStats()
        self._respond, self._beams, self._loglik, self._next = respond, beams, loglik, next_token
        self.prompts: list[str] = []
        #: the JSON schema each prompt was given (None: free text)
        self.schemas: list[dict | None] = []
        #: the max_new_tokens of each generate call, in order
        self.budgets: list[int] = []

    def generate(self, prompts, *, max_new_tokens, stop=None, chat=False, system=None,
                 temperature=0.0, sample_index=0, json_schemas=None):
        self.schemas += [None] * len(prompts) if json_schemas is None else list(json_schemas)
        self.budgets.append(max_new_tokens)
        out = []
        for p in prompts:
            self.prompts.append(p)
            text, finish = self._respond(p), "stop"
            if isinstance(text, tuple):  # (text, finish_reason): a scripted cut reply
                text, finish = text
            for s in stop or ():
                text = text.split(s)[0]
            out.append(Generation(text, len(p.split()), len(text.split()), finish))
        self.stats.misses += len(prompts)
        return out

    def beam_search(self, prompts, *, num_beams, max_new_tokens, stop=("\n",)):
        if self._beams is None:
            return [[Beam(self._respond(p), 0.0)] * num_beams for p in prompts]
        return [[Beam(t, lp) for t, lp in self._beams(p)][:num_beams] for p in prompts]

    def loglikelihood(self, pairs):
        f = self._loglik or (lambda c, x: -float(len(x)))
        return [f(c, x) for c, x in pairs]

    def next_token_logprobs(self, prompts, candidates, *, chat=False):
        if self._next is None:
            return np.full((len(prompts), len(candidates)), -np.log(len(candidates)))
        return np.array([list(self._next(p, candidates)) for p in prompts], dtype=float)


def sc_job_prompts(tmp_path, monkeypatch, splits: dict, *, n_shots: int, icl_by_domain: bool,
                   label: str = "Prompt") -> dict[str, str]:
    """question -> the prompt the persistent beam-search job (`sc_job`) sends for each test
    question of `splits` (`build_items`' train and test frames), with a scripted model."""
    import pandas as pd

    from selfknow.protocols.persistent import jobs
    from selfknow.protocols.persistent.jobs import SplitIO, sc_job
    from selfknow.records import write_parquet

    tmp_path.mkdir(parents=True, exist_ok=True)
    for split, df in splits.items():
        write_parquet(df, tmp_path / f"{split}.parquet")
    seen: list[str] = []

    def beams(prompt: str) -> list[tuple[str, float]]:
        seen.append(prompt)
        return [(" x", 0.0)]

    monkeypatch.setattr(jobs, "load_lm", lambda *a, **k: ScriptedLM(lambda p: "", beams=beams))
    test = SplitIO(str(tmp_path / "test.parquet"), len(splits["test"]), str(tmp_path / "beams.parquet"),
                   str(tmp_path / "sc.parquet"))
    sc_job({"test": test}, str(tmp_path / "train.parquet"), {"name": "m"}, "C1", n_shots=n_shots, icl_by_domain=icl_by_domain, seed=0, num_beams=1, max_new_tokens=4,
           equivalence="normalised", normalisation="squad", prompt_label=label, cache_dir=str(tmp_path / "cache"),
           correctness="exact")
    assert len(seen) == len(splits["test"])
    return dict(zip(pd.read_parquet(tmp_path / "beams.parquet")["question"], seen))
