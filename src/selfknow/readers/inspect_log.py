"""inspect_ai evaluation logs -> plain records (docs/own-results.md, "inspect_ai").

A log (``.eval``, or ``.json`` with ``--log-format json``) holds the run's model
(``eval.model``), its task (``eval.task``) and per sample the scorers' ``scores`` and the
model's ``output``. Logs are read with inspect_ai's own ``read_eval_log``, so every log format
version that the installed inspect_ai reads is read here.

correct     ``scores.<scorer>.value``: "C" (CORRECT) -> 1, "I" (INCORRECT) -> 0, or a number
            or boolean that is 0 or 1; other values (partial credit, "N") stop the reader.
confidence  ``sequence-prob`` (default): exp of the summed token log-probabilities of the
            sample's final output, ``output.choices[0].logprobs`` (logged when the eval ran
            with ``--logprobs``); or ``score:NAME``: the value of the scorer NAME, a number in
            [0, 1] (a confidence computed by a scorer of the researcher's own).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import plain_frame

SEQUENCE_PROB = "sequence-prob"
_LETTERS = {"C": 1, "I": 0}


def read_inspect_log(path: str | Path, *, checkpoint: str | None = None, scorer: str | None = None,
                     confidence: str = SEQUENCE_PROB, epoch: int | None = None) -> pd.DataFrame:
    """Plain records from an inspect_ai log file, or from every log in a log directory.

    ``checkpoint``: the label of every record (default: the log's ``eval.model``).
    ``scorer``: the scorer whose value is correctness (default: the only one).
    ``confidence``: "sequence-prob" or "score:NAME" (module doc); it is also the method.
    ``epoch``: which epoch to read when the samples ran several (one record per item).
    """
    if confidence != SEQUENCE_PROB and not confidence.startswith("score:"):
        raise ValueError(f"confidence must be {SEQUENCE_PROB!r} or 'score:NAME', got {confidence!r}")
    try:
        from inspect_ai.log import list_eval_logs, read_eval_log
    except ImportError:
        raise ImportError("reading inspect_ai logs needs the inspect-ai package (pip install inspect-ai)") from None
    path = Path(path)
    if path.is_dir():
        files = sorted(str(info.name).removeprefix("file://") for info in list_eval_logs(str(path)))
        if not files:
            raise ValueError(f"{path}: no inspect_ai logs in this directory")
    elif path.is_file():
        files = [str(path)]
    else:
        raise ValueError(f"{path}: no such file or directory")
    rows: list[dict] = []
    sources: list[str] = []
    for file in files:
        log = read_eval_log(file)
        if log.status != "success":
            raise ValueError(f"{file}: the eval's status is {log.status!r}, not 'success'; its samples "
                             "may be incomplete")
        label = checkpoint or log.eval.model
        samples = log.samples or []
        if not samples:
            raise ValueError(f"{file}: the log holds no samples")
        epochs = sorted({s.epoch for s in samples})
        if epoch is None and len(epochs) > 1:
            raise ValueError(f"{file}: samples ran {len(epochs)} epochs {epochs}; pass epoch= one of them")
        if epoch is not None and epoch not in epochs:
            raise ValueError(f"{file}: no samples of epoch {epoch}; logged epochs: {epochs}")
        for sample in samples:
            if epoch is not None and sample.epoch != epoch:
                continue
            where = f"{file}: sample {sample.id!r} (epoch {sample.epoch})"
            rows.append({"item": str(sample.id), "checkpoint": label, "method": confidence,
                         "correct": _correct(sample, scorer, where),
                         "confidence": _confidence(sample, confidence, where),
                         "dataset": log.eval.task})
            sources.append(where)
    return plain_frame(rows, sources, path)


def _score(sample, name: str | None, where: str, purpose: str):
    scores = sample.scores or {}
    if name is None:
        if len(scores) != 1:
            raise ValueError(f"{where}: {len(scores)} scorers {sorted(scores)}; pass scorer= the one "
                             f"whose value is {purpose}")
        name = next(iter(scores))
    if name not in scores:
        raise ValueError(f"{where}: field 'scores.{name}' is missing (scorers: {sorted(scores)})")
    return name, scores[name].value


def _correct(sample, scorer: str | None, where: str) -> int:
    name, value = _score(sample, scorer, where, "correctness")
    if isinstance(value, str) and value in _LETTERS:
        return _LETTERS[value]
    if isinstance(value, (bool, int, float)) and value in (0, 1):
        return int(value)
    raise ValueError(f"{where}: field 'scores.{name}.value' must be 'C', 'I', 0 or 1 to serve as "
                     f"correctness, got {value!r}")


def _confidence(sample, method: str, where: str) -> float:
    if method.startswith("score:"):
        name, value = _score(sample, method.removeprefix("score:"), where, "confidence")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"{where}: field 'scores.{name}.value' must be a number in [0, 1] to "
                             f"serve as confidence, got {value!r}")
        return float(value)
    choices = sample.output.choices if sample.output is not None else []
    logprobs = choices[0].logprobs if choices else None
    if logprobs is None or not logprobs.content:
        raise ValueError(f"{where}: field 'output.choices[0].logprobs' is absent; run the eval with "
                         "--logprobs, or name a scorer that carries a confidence (confidence='score:NAME')")
    total = math.fsum(lp.logprob for lp in logprobs.content)
    if not math.isfinite(total):
        raise ValueError(f"{where}: field 'output.choices[0].logprobs' sums to {total}")
    return math.exp(total)
