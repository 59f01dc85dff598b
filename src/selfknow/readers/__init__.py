"""Readers of outside records (docs/own-results.md): each turns one file of a format
researchers have into plain records (`selfknow.readers.plain`: one row per item, checkpoint
and method with correctness and confidence), checked by `plain.check_records`.

A reader is a function path -> DataFrame registered in `READERS` under its format name;
`SUFFIXES` maps file suffixes to the format `read_records` picks when none is named. Add a
format with a module of its own and one entry in each.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from .plain import read_plain

Reader = Callable[[Path], pd.DataFrame]

READERS: dict[str, Reader] = {"plain": read_plain}
SUFFIXES: dict[str, str] = {".csv": "plain", ".jsonl": "plain", ".parquet": "plain"}


def detect_format(path: str | Path) -> str:
    """The format of `path` by its suffix (`SUFFIXES`)."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: cannot tell the record format from the suffix {suffix or '(none)'!r}; "
                         f"name one of {', '.join(READERS)} (suffixes known: {', '.join(SUFFIXES)})")
    return SUFFIXES[suffix]


def read_records(path: str | Path, fmt: str = "auto") -> pd.DataFrame:
    """Plain records from `path` in format `fmt` (a key of `READERS`, or "auto": by suffix)."""
    name = detect_format(path) if fmt == "auto" else fmt
    if name not in READERS:
        raise ValueError(f"unknown record format {name!r}; known: {', '.join(READERS)}")
    return READERS[name](Path(path))
