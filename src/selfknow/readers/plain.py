"""The plain record format: one row per (item, checkpoint, method), as CSV, JSONL or parquet.

Columns (any others are ignored):

- ``item`` (question id), ``checkpoint``, ``method``: non-empty text;
- ``correct``: 0 or 1 (also ``0.0``/``1.0``, ``true``/``false``), the correctness of the
  checkpoint's answer to the item;
- ``confidence``: a number in [0, 1], the method's confidence in that answer;
- optional ``role``: ``eval`` (default) or ``train`` (a training checkpoint, left out of the
  evaluation), optional ``dataset`` (text), optional ``seed`` (integer: one training seed of a
  trained method; its metrics are averaged over seeds, Eq. 2 of the persistent paper).

`check_records` turns a frame of raw cells into a clean one (the dtypes above, the index
naming where each row is in its file), or raises ValueError naming the file, the row and the
column; every reader of `selfknow.readers` returns its output.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.records import atomic_path, json_lines

REQUIRED = ("item", "checkpoint", "method", "correct", "confidence")
OPTIONAL = ("role", "dataset", "seed")
COLUMNS = REQUIRED + OPTIONAL
ROLES = ("eval", "train")
TEXT = ("item", "checkpoint", "method", "dataset")
_TRUE, _FALSE = {"1", "1.0", "true"}, {"0", "0.0", "false"}


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or (isinstance(v, str) and not v.strip())


def _number(v) -> float:
    """A cell as a float, NaN if it is none; text through Python's `float`, which rounds
    correctly (pandas' fast text parser may miss the written double by one unit), so a
    confidence read back from CSV is the one written."""
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return float("nan")
    if v is None or isinstance(v, (bool, np.bool_)):
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def check_records(raw: pd.DataFrame, source: str, where: Sequence[str]) -> pd.DataFrame:
    """The plain records of `raw` (columns as the module doc; `where[k]` says where row k is in
    `source`, e.g. "line 7"). Raises ValueError naming `source`, the row and the column of the
    first bad cell: a missing column, an empty id, a correctness other than 0/1, a confidence
    that is not a number or lies outside [0, 1], an unknown role, a seed that is not an
    integer, or a row repeating another's (item, checkpoint, method, dataset, seed)."""
    where = pd.Index([str(w) for w in where])
    if len(where) != len(raw):
        raise ValueError(f"{source}: {len(where)} row locations for {len(raw)} rows")
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {', '.join(map(repr, missing))} (the file has "
                         f"{', '.join(map(repr, map(str, raw.columns)))}; plain records need {', '.join(REQUIRED)})")
    if raw.empty:
        raise ValueError(f"{source}: no records")
    out = pd.DataFrame(index=where)

    def fail(bad, col: str, what: str) -> None:
        k = int(np.flatnonzero(np.asarray(bad))[0])
        raise ValueError(f"{source}: {where[k]}, column {col!r}: {raw[col].tolist()[k]!r} {what}")

    for col in TEXT:
        if col not in raw.columns:
            continue
        values = raw[col].tolist()
        blank = [_blank(v) for v in values]
        if any(blank):
            fail(blank, col, "is empty")
        out[col] = [v if isinstance(v, str) else str(v) for v in values]
    flags = [str(v).strip().lower() for v in raw["correct"].tolist()]
    ok = [f in _TRUE or f in _FALSE for f in flags]
    if not all(ok):
        fail(~np.asarray(ok), "correct", "is not 0 or 1")
    out["correct"] = np.array([f in _TRUE for f in flags], dtype=np.int8)
    num = np.array([_number(v) for v in raw["confidence"].tolist()], dtype=float)
    if np.isnan(num).any():
        fail(np.isnan(num), "confidence", "is not a number")
    if not np.all((num >= 0) & (num <= 1)):
        fail(~((num >= 0) & (num <= 1)), "confidence", "lies outside [0, 1]")
    out["confidence"] = num
    if "role" in raw.columns:
        role = raw["role"].map(lambda v: "eval" if _blank(v) else str(v).strip().lower())
        bad = ~role.isin(ROLES)
        if bad.any():
            fail(bad, "role", f"is not one of {', '.join(ROLES)}")
        out["role"] = role.to_numpy()
    if "seed" in raw.columns:
        seed = np.array([_number(v) for v in raw["seed"].tolist()], dtype=float)
        bad = ~np.isfinite(seed) | (seed != np.round(seed))
        if bad.any():
            fail(bad, "seed", "is not an integer")
        out["seed"] = seed.astype(np.int64)
    key = [c for c in ("item", "checkpoint", "method", "dataset", "seed") if c in out.columns]
    dup = out.duplicated(key, keep=False).to_numpy()
    if dup.any():
        first = out[dup].groupby(key, sort=False).head(2)
        raise ValueError(f"{source}: {first.index[1]} repeats {first.index[0]}: two rows for one "
                         f"({', '.join(key)}) = ({', '.join(map(str, first.iloc[0][key]))})")
    out = out[[c for c in COLUMNS if c in out.columns]]
    out.attrs["source"] = source
    return out


def read_plain(path: str | Path) -> pd.DataFrame:
    """Plain records from a CSV, JSONL (one JSON object per line) or parquet file, by suffix;
    `check_records` names a bad row as "line N" (CSV, JSONL: the file's line) or "row N"
    (parquet, 1-based)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        raw = pd.read_parquet(path)
        where = [f"row {k + 1}" for k in range(len(raw))]
    elif suffix == ".jsonl":
        numbered = list(json_lines(path))
        rows, where = [row for _, row in numbered], [f"line {n}" for n, _ in numbered]
        raw = pd.DataFrame(rows)
    elif suffix == ".csv":
        # every cell as text: `check_records` says which cell is not a number
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
        where = [f"line {k + 2}" for k in range(len(raw))]
    else:
        raise ValueError(f"{path}: plain records are .csv, .jsonl or .parquet, not {path.suffix or 'no suffix'!r}")
    return check_records(raw, str(path), where)


def write_plain(records: pd.DataFrame, path: str | Path) -> None:
    """Write plain records atomically as CSV, JSONL or parquet, by the suffix of `path`."""
    path = Path(path)
    df = records[[c for c in COLUMNS if c in records.columns]].reset_index(drop=True)
    suffix = path.suffix.lower()
    with atomic_path(path) as tmp:
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        elif suffix == ".jsonl":
            # json's float repr round-trips exactly (pandas' to_json keeps 15 digits at most)
            with open(tmp, "w", encoding="utf-8") as f:
                for row in df.to_dict("records"):
                    f.write(json.dumps({k: v.item() if hasattr(v, "item") else v for k, v in row.items()}) + "\n")
        elif suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            raise ValueError(f"{path}: plain records are written as .csv, .jsonl or .parquet")
