"""Readers of outside records (docs/own-results.md): each turns one file or log directory of a
format researchers have into plain records (`selfknow.readers.plain`: one row per item,
checkpoint and method with correctness and confidence, and optionally role, dataset, seed).

A reader is a function (path, **options) -> DataFrame registered in `READERS` under its
format name; `SUFFIXES` maps file suffixes to the format `read_records` picks when none is
named. Add a format with a module of its own and one entry in each.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

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


def read_records(path: str | Path, fmt: str = "auto", *, methods: Sequence[str] | None = None,
                 checkpoints: Sequence[str] | None = None, confidence_field: str | None = None,
                 **options) -> pd.DataFrame:
    """Plain records from `path` in format `fmt` (a key of `READERS`, or "auto": by suffix);
    `options` go to that format's reader (`read_lm_eval`, `read_inspect_log`). The options
    every format takes (`selfknow persistent-eval`'s flags):

    - `methods`: the confidence methods to keep, in this order (lm-eval: its multiple-choice
      methods, and a generation task's `confidence_field`, which is kept when not listed;
      inspect: "sequence-prob" or "score:NAME" each; plain: the `method` values);
    - `checkpoints`: the checkpoints in training order, each "NAME" or "NAME=LABEL" (`relabel`);
    - `confidence_field`: the logged field that carries a confidence (lm-eval: a generation
      task's per-sample field; inspect: a scorer, read as method "score:NAME"); plain records
      have their `confidence` column.

    `attrs["notes"]` holds what a reader chose that the caller may want otherwise (the methods
    of a task it did not read)."""
    name = detect_format(path) if fmt == "auto" else fmt
    if name not in READERS:
        raise ValueError(f"unknown record format {name!r}; known: {', '.join(READERS)}")
    path = Path(path)
    if name == "lm-eval":
        records = READERS[name](path, methods=methods, confidence_field=confidence_field, **options)
        if methods and confidence_field and confidence_field not in methods:
            # the generation tasks' method is the field: listing the multiple-choice ones keeps it
            methods = [*methods, confidence_field]
    elif name == "inspect":
        wanted = list(methods or []) + ([f"score:{confidence_field}"] if confidence_field else [])
        parts = [READERS[name](path, confidence=m, **options) for m in wanted] or [READERS[name](path, **options)]
        records = pd.concat(parts) if len(parts) > 1 else parts[0]
        records.attrs = dict(parts[0].attrs)
    else:
        if confidence_field:
            raise ValueError(f"{path}: plain records carry their confidence in the column 'confidence'; "
                             "confidence_field is for lm-eval and inspect logs")
        records = READERS[name](path, **options)
    notes = list(records.attrs.get("notes", []))
    if methods:
        records = _keep_methods(records, list(methods), path)
    if checkpoints:
        records = relabel(records, checkpoints, path)
    records.attrs.update(source=str(path), notes=notes)
    return records


def _keep_methods(records: pd.DataFrame, methods: list[str], path: Path) -> pd.DataFrame:
    """The rows of `methods`, ordered by method as listed (rows keep their order within one)."""
    missing = [m for m in methods if m not in set(records["method"])]
    if missing:
        raise ValueError(f"{path}: no records of method(s) {', '.join(missing)}; the records hold "
                         f"{', '.join(dict.fromkeys(records['method']))}")
    kept = records[records["method"].isin(methods)]
    order = kept["method"].map({m: i for i, m in enumerate(methods)}).to_numpy()
    return kept.iloc[order.argsort(kind="stable")]


def relabel(records: pd.DataFrame, checkpoints: Sequence[str], path: str | Path) -> pd.DataFrame:
    """Records with checkpoints renamed and in the order given (the evaluation takes the order
    of first appearance as training order). Each entry is "NAME" or "NAME=LABEL"; NAME is a
    logged checkpoint, or its last path component when that picks one (a model path
    "/ckpt/step-1000" or "hf/step-1000" as "step-1000"). Every logged checkpoint must be named."""
    logged = list(dict.fromkeys(records["checkpoint"]))
    short: dict[str, list[str]] = {}
    for c in logged:
        short.setdefault(PurePosixPath(c).name, []).append(c)
    rename: dict[str, str] = {}
    for entry in checkpoints:
        name, _, label = entry.partition("=")
        hits = [name] if name in logged else short.get(name, [])
        if len(hits) != 1:
            why = "names several" if hits else "matches none"
            raise ValueError(f"{path}: checkpoint {name!r} {why} of the logged checkpoints {logged}")
        if hits[0] in rename:
            raise ValueError(f"{path}: checkpoint {name!r} is named twice")
        rename[hits[0]] = label or name
    unnamed = [c for c in logged if c not in rename]
    if unnamed:
        raise ValueError(f"{path}: checkpoints {unnamed} are not named; name every logged checkpoint "
                         f"({logged}) in training order")
    if len(set(rename.values())) < len(rename):
        raise ValueError(f"{path}: two checkpoints get one label: {list(rename.values())}")
    order = records["checkpoint"].map({c: i for i, c in enumerate(rename)}).to_numpy()
    out = records.iloc[order.argsort(kind="stable")].copy()
    out["checkpoint"] = out["checkpoint"].map(rename)
    return out


def plain_frame(rows: list[dict], sources: list[str], path: str | Path) -> pd.DataFrame:
    """Rows (dicts with plain.REQUIRED and ``dataset``) read from `path` -> plain records
    indexed by where each was read (``sources[i]``: file and line or sample), with
    ``attrs["source"]`` `path`, so that an evaluation's errors name them, as a plain file's; a
    repeated (dataset, item, checkpoint, method) stops naming both places it was read from."""
    frame = pd.DataFrame(rows, columns=[*REQUIRED, "dataset"])
    key = ["dataset", "item", "checkpoint", "method"]
    dup = frame.duplicated(key)
    if dup.any():
        second = int(frame.index[dup][0])
        first = int((frame[key] == frame.loc[second, key]).all(axis=1).idxmax())
        raise ValueError(f"two records for one (dataset, item, checkpoint, method) "
                         f"{tuple(frame.loc[first, key])}: {sources[first]} and {sources[second]}; "
                         "give each run its own checkpoint label")
    frame = frame.astype({"item": str, "checkpoint": str, "method": str, "correct": int,
                          "confidence": float, "dataset": str})
    frame.index = pd.Index(sources)
    frame.attrs["source"] = str(path)
    return frame
