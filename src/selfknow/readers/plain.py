"""The plain record format: one row per (item, checkpoint, method), as CSV, JSONL or parquet.

Columns (any others are ignored):

- ``item`` (question id), ``checkpoint``, ``method``: non-empty text;
- ``correct``: 0 or 1 (also ``0.0``/``1.0``, ``true``/``false``), the correctness of the
  checkpoint's answer to the item;
- ``confidence``: a number in [0, 1], the method's confidence in that answer;
- optional ``role``: ``eval`` (default) or ``train`` (a training checkpoint, left out of the
  evaluation), optional ``dataset`` (text), optional ``seed`` (integer: one training seed of a
  trained method; its metrics are averaged over seeds, Eq. 2 of the persistent paper).

`read_plain` reads them through `selfknow.records.RecordTable` (so a bad cell's error names the
file, the row and the column as every record table's does) and adds the plain format's own
checks: roles and one row per (item, checkpoint, method, dataset, seed).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from selfknow.records import RecordTable, shown, write_record_table

REQUIRED = ("item", "checkpoint", "method", "correct", "confidence")
OPTIONAL = ("role", "dataset", "seed")
COLUMNS = REQUIRED + OPTIONAL
ROLES = ("eval", "train")


def read_plain(path: str | Path) -> pd.DataFrame:
    """Plain records from a CSV, JSONL or parquet file (by suffix), checked: the dtypes of the
    module doc, the index naming where each row is in the file ("line N" in CSV and JSONL,
    "row N" in parquet) and ``attrs["source"]`` the file, as `evaluate.record_arrays` names
    them. Raises ValueError naming the file, the row and the column of the first bad cell: a
    missing column, an empty id, a correctness other than 0/1, a confidence that is not a
    number in [0, 1], an unknown role, a seed that is not an integer, or a row repeating
    another's (item, checkpoint, method, dataset, seed)."""
    t = RecordTable(path)
    t.require(*REQUIRED)
    out = pd.DataFrame({"item": t.text("item"), "checkpoint": t.text("checkpoint"), "method": t.text("method"),
                        "correct": t.binary("correct").astype(np.int8),
                        "confidence": t.probability("confidence")})
    if t.has("role"):
        out["role"] = _roles(t)
    if t.has("dataset"):
        out["dataset"] = t.text("dataset")
    if t.has("seed"):
        out["seed"] = t.integer("seed")
    out.index = pd.Index([t.where(k) for k in range(len(out))])
    key = [c for c in ("item", "checkpoint", "method", "dataset", "seed") if c in out.columns]
    dup = out.duplicated(key, keep=False).to_numpy()
    if dup.any():
        first = out[dup].groupby(key, sort=False).head(2)
        raise ValueError(f"{t.path}: {first.index[1]} repeats {first.index[0]}: two rows for one "
                         f"({', '.join(key)}) = ({', '.join(map(str, first.iloc[0][key]))})")
    out = out[[c for c in COLUMNS if c in out.columns]]
    out.attrs["source"] = str(t.path)
    return out


def _roles(t: RecordTable) -> np.ndarray:
    """The role column, lower case, an empty cell "eval"."""
    role = t.frame["role"].map(lambda v: "eval" if pd.isna(v) or not str(v).strip() else str(v).strip().lower())
    bad = np.flatnonzero(~role.isin(ROLES).to_numpy())
    if bad.size:
        raise t.error(int(bad[0]), "role", f"{shown(t.frame['role'].iloc[bad[0]])} is not one of {', '.join(ROLES)}")
    return role.to_numpy()


def write_plain(records: pd.DataFrame, path: str | Path) -> None:
    """Write plain records atomically as CSV, JSONL or parquet, by the suffix of `path`
    (`write_record_table`: every digit of a confidence kept)."""
    write_record_table(records[[c for c in COLUMNS if c in records.columns]].reset_index(drop=True), path)
