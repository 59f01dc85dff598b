"""Readers of outside records (docs/own-results.md): each turns one file or log directory of a
format researchers have into plain records (`selfknow.readers.plain`: one row per item,
checkpoint and method with correctness and confidence, and optionally role, dataset, seed).

A reader is a function (path, **options) -> DataFrame registered in `READERS` under its
format name; `SUFFIXES` maps file suffixes to the format `read_records` picks when none is
named. Add a format with a module of its own and one entry in each.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from .plain import REQUIRED, read_plain

Reader = Callable[..., pd.DataFrame]


def _lm_eval(path: Path, **options) -> pd.DataFrame:
    from .lm_eval import read_lm_eval

    return read_lm_eval(path, **options)


def _inspect(path: Path, **options) -> pd.DataFrame:
    from .inspect_log import read_inspect_log

    return read_inspect_log(path, **options)


READERS: dict[str, Reader] = {"plain": read_plain, "lm-eval": _lm_eval, "inspect": _inspect}
SUFFIXES: dict[str, str] = {".csv": "plain", ".jsonl": "plain", ".parquet": "plain", ".eval": "inspect"}


def detect_format(path: str | Path) -> str:
    """The format of `path` by its suffix (`SUFFIXES`)."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: cannot tell the record format from the suffix {suffix or '(none)'!r}; "
                         f"name one of {', '.join(READERS)} (suffixes known: {', '.join(SUFFIXES)})")
    return SUFFIXES[suffix]


def read_records(path: str | Path, fmt: str = "auto", **options) -> pd.DataFrame:
    """Plain records from `path` in format `fmt` (a key of `READERS`, or "auto": by suffix);
    `options` go to that format's reader (`read_lm_eval`, `read_inspect_log`)."""
    name = detect_format(path) if fmt == "auto" else fmt
    if name not in READERS:
        raise ValueError(f"unknown record format {name!r}; known: {', '.join(READERS)}")
    return READERS[name](Path(path), **options)


def plain_frame(rows: list[dict], sources: list[str]) -> pd.DataFrame:
    """Rows (dicts with plain.REQUIRED and ``dataset``) -> plain records; ``sources[i]`` names where
    row i was read (file and line or sample), so a repeated (dataset, item, checkpoint, method)
    stops naming both places it was read from."""
    frame = pd.DataFrame(rows, columns=[*REQUIRED, "dataset"])
    key = ["dataset", "item", "checkpoint", "method"]
    dup = frame.duplicated(key)
    if dup.any():
        second = int(frame.index[dup][0])
        first = int((frame[key] == frame.loc[second, key]).all(axis=1).idxmax())
        raise ValueError(f"two records for one (dataset, item, checkpoint, method) "
                         f"{tuple(frame.loc[first, key])}: {sources[first]} and {sources[second]}; "
                         "give each run its own checkpoint label")
    return frame.astype({"item": str, "checkpoint": str, "method": str, "correct": int,
                         "confidence": float, "dataset": str})
