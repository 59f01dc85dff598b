"""Reading a dataset's rows (hub or local copy) and the steps the papers' loaders share."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.records import ITEM_COLUMNS, json_lines


class ItemError(ValueError):
    """A malformed dataset row; the message names the file (or dataset) and the row."""


def make_item(item_id, dataset, domain, question, choices, answer, aliases, split) -> dict:
    """One row of the item schema (`selfknow.records.ITEM_COLUMNS`)."""
    return dict(item_id=str(item_id), dataset=dataset, domain=domain, question=question,
                choices=None if choices is None else list(choices), answer=answer,
                aliases=list(aliases), split=split)


def frame(items: list[dict]) -> pd.DataFrame:
    """Items as a frame with the item schema's columns (also when there are none)."""
    return pd.DataFrame(items, columns=ITEM_COLUMNS)


class Where(str):
    """Where a split's rows came from, "<dataset>: <file or hub split>", printed as that, and
    how a row is named in an error (`at`): "line N" of a JSON-lines file (its line number,
    blank lines counted, as the read errors give it), else "row N" (1-based)."""

    lines: tuple[int, ...] | None

    def __new__(cls, text: str, lines: Sequence[int] | None = None) -> "Where":
        where = super().__new__(cls, text)
        where.lines = None if lines is None else tuple(lines)
        return where


def at(where: str, i: int) -> str:
    """`where` and the name of its row at position `i` (0-based in the rows read): "…: line 7"
    for a JSON-lines `Where`, else "…: row i + 1"."""
    if isinstance(where, Where) and where.lines is not None:
        return f"{where}: line {where.lines[i]}"
    return f"{where}: row {i + 1}"


def read_rows(name: str, spec: dict, split: str) -> tuple[list[dict], Where]:
    """The rows of one split, as dicts in the hub's row schema, and where they came from
    (`Where`, prefixed with the dataset's name as every loader error is).

    With `path`: a parquet or JSONL file (when the loader reads one split) or a directory
    holding `<split>.parquet` or `<split>.jsonl`. Otherwise `datasets.load_dataset(hub_id,
    config_name, split=split, revision=revision)`. A split without rows is an error naming
    its source (a later range check would only say that too few rows remain)."""
    if "path" in spec:
        rows, where = _read_local(name, Path(spec["path"]), split)
    else:
        import datasets  # lazy: only paper-scale configs read the hub (pip install -e '.[paper]')

        ds = datasets.load_dataset(spec["hub_id"], spec["config_name"], split=split, revision=spec["revision"])
        rows, where = list(ds), Where(f"{name}: {spec['hub_id']}@{spec['revision']} ({spec['config_name']}, {split})")
    if not rows:
        raise ItemError(f"{where}: no rows")
    return rows, where


def _read_local(name: str, path: Path, split: str) -> tuple[list[dict], Where]:
    if path.is_dir():
        found = [path / f"{split}{ext}" for ext in (".parquet", ".jsonl") if (path / f"{split}{ext}").exists()]
        if not found:
            raise ItemError(f"{name}: {path} has no {split}.parquet or {split}.jsonl")
        path = found[0]
    elif not path.exists():
        raise ItemError(f"{name}: local copy {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist(), Where(f"{name}: {path}")
    if path.suffix != ".jsonl":
        raise ItemError(f"{name}: {path}: expected a .parquet or .jsonl file")
    return read_json_lines(name, path)


def read_json_lines(name: str, path: Path) -> tuple[list[dict], Where]:
    """The rows of a JSON-lines file whatever its suffix (BFCL names its JSON lines .json),
    and their `Where` (rows named by line)."""
    try:
        numbered = json_lines(path)
    except ValueError as err:
        raise ItemError(f"{name}: {err}") from None
    return [row for _, row in numbered], Where(f"{name}: {path}", [n for n, _ in numbered])


def require_fields(rows: list[dict], fields: Sequence[str] | Mapping[str, type | tuple[type, ...]],
                   where: str) -> None:
    """Raise naming the first row (`at`) that is not an object, lacks one of `fields`, or
    (when `fields` maps each name to its type(s)) holds a value of another type in one; a
    bool is no int here (JSON's true is no index)."""
    types = fields if isinstance(fields, Mapping) else {}
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ItemError(f"{at(where, i)}: expected an object, got {type(r).__name__}")
        missing = [k for k in fields if k not in r or r[k] is None]
        if missing:
            raise ItemError(f"{at(where, i)}: missing field(s) {missing}")
        for k, want in types.items():
            v = r[k]
            want = want if isinstance(want, tuple) else (want,)
            if not isinstance(v, want) or isinstance(v, bool) and int in want and bool not in want:
                names = " or ".join(t.__name__ for t in want)
                raise ItemError(f"{at(where, i)}: field {k!r} must be {names}, got "
                                f"{type(v).__name__} {str(v)[:40]!r}")


def hf_shuffle_order(n: int, seed: int) -> np.ndarray:
    """Row order of `datasets.Dataset.shuffle(seed=seed)` on n rows: the permutation of
    `numpy.random.default_rng(seed)` (how `datasets` draws it), so a local copy is shuffled
    exactly as the authors' hub dataset was."""
    return np.random.default_rng(seed).permutation(n)


def dedup_stripped(questions) -> list[int]:
    """Positions of the first occurrence of each stripped question (the authors dedup on the
    exact stripped text, keeping the first in shuffled order)."""
    seen: set[str] = set()
    keep = []
    for i, q in enumerate(questions):
        q = q.strip()
        if q not in seen:
            seen.add(q)
            keep.append(i)
    return keep


def take_range(seq: list, rng, what: str) -> list:
    """seq[start:stop] for rng = [start, stop]; raise when the list is too short for it (the
    paper's split sizes are part of its protocol)."""
    start, stop = rng
    if not 0 <= start <= stop:
        raise ItemError(f"{what}: range {list(rng)} must be [start, stop] with 0 <= start <= stop")
    if stop > len(seq):
        raise ItemError(f"{what}: range {list(rng)} needs {stop} questions, only {len(seq)} remain after filtering")
    return seq[start:stop]
