"""Readers that turn evaluation logs researchers already have into plain records.

Plain records: one row per (item, checkpoint, method) with ``item`` (str), ``checkpoint``
(str), ``method`` (str), ``correct`` (0/1), ``confidence`` (float in [0, 1]) and, when the
source knows them, ``role`` ("train" | "eval") and ``dataset`` (str). Field mappings per
format: docs/own-results.md.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

COLUMNS = ("item", "checkpoint", "method", "correct", "confidence")
OPTIONAL_COLUMNS = ("role", "dataset")


def read_records(path: str | Path, fmt: str, **options) -> pd.DataFrame:
    """Plain records from ``path`` in format ``fmt`` ("lm-eval" or "inspect"); ``options`` go
    to that format's reader (``read_lm_eval`` / ``read_inspect_log``)."""
    if fmt == "lm-eval":
        from .lm_eval import read_lm_eval

        return read_lm_eval(path, **options)
    if fmt == "inspect":
        from .inspect_log import read_inspect_log

        return read_inspect_log(path, **options)
    raise ValueError(f"unknown records format {fmt!r}; known: 'lm-eval', 'inspect'")


def plain_frame(rows: list[dict], sources: list[str]) -> pd.DataFrame:
    """Rows (dicts with COLUMNS and ``dataset``) -> plain records; ``sources[i]`` names where
    row i was read (file and line or sample), so a repeated (dataset, item, checkpoint, method)
    stops naming both places it was read from."""
    frame = pd.DataFrame(rows, columns=[*COLUMNS, "dataset"])
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
