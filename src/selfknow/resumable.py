"""Resumable, chunked record generation.

A generation job writes each finished chunk of items to `<output>.parts/` atomically before
starting the next; a killed job, rerun, reads the finished chunks back and computes only the
rest, so no record is lost or duplicated.

The parts carry the full identity of what produced them, in `<output>.parts/identity.json`:
the job's parameters and the model's identity (`LM.identity`: backend, model id, revision or
weight fingerprint, adapter hash, backend settings), with the prompt version among the
parameters. A rerun whose identity differs in anything (new weights at the same path, another
revision, a changed prompt) discards every part, logs which keys differ, and starts clean, so
a resumed output never mixes two models' records. Chunk file names also carry a fingerprint
of the chunk's item ids.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Callable

import pandas as pd
from tqdm import tqdm

from selfknow.records import write_parquet, write_text

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def _fingerprint(*parts) -> str:
    return hashlib.sha256(_canonical(parts).encode()).hexdigest()[:16]


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two identities."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{k}.")
        elif _canonical(a) != _canonical(b):
            out.append(f"{prefix}{k}")
    return out


def _claim_parts(parts_dir: Path, identity: dict) -> None:
    """Keep `parts_dir`'s chunks only if they were made by `identity`; else discard them."""
    stamp = parts_dir / IDENTITY_FILE
    if parts_dir.is_dir():
        try:
            old = json.loads(stamp.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            old = None
        if old != json.loads(_canonical(identity)):
            n = sum(1 for p in parts_dir.glob("*.parquet"))
            why = ("no identity stamp" if old is None
                   else "different " + ", ".join(_differences(old, json.loads(_canonical(identity)))))
            if n:
                log.warning("%s: discarding %d partial chunk(s) of another run (%s); starting clean",
                            parts_dir, n, why)
            shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    if not stamp.exists():
        write_text(_canonical(identity) + "\n", stamp)


def map_chunks(
    items: pd.DataFrame,
    fn: Callable[[pd.DataFrame], pd.DataFrame],
    out_path: str | Path,
    *,
    chunk_size: int = 128,
    params: dict | None = None,
    model: dict | None = None,
    key: str = "item_id",
    desc: str = "records",
    finalize: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Apply `fn` to consecutive chunks of `items`, checkpointing each chunk's records, then
    write their concatenation (passed through `finalize`) to `out_path` atomically and remove
    the parts. `params` (the job's settings, prompt version included) and `model` (the
    model's `LM.identity()`) identify the run whose parts may be resumed (see the module
    docstring); `key` names the column that identifies a record in the chunk fingerprints."""
    out_path = Path(out_path)
    parts_dir = out_path.with_name(out_path.name + ".parts")
    identity = {"params": params or {}, "model": model or {}}
    _claim_parts(parts_dir, identity)
    job = _fingerprint(identity)
    frames, resumed = [], 0
    starts = range(0, len(items), chunk_size)
    for start in tqdm(starts, desc=desc, unit="chunk", mininterval=5):
        chunk = items.iloc[start:start + chunk_size]
        part = parts_dir / f"{start:07d}-{_fingerprint(job, list(chunk[key]))}.parquet"
        if part.exists():
            frames.append(pd.read_parquet(part))
            resumed += 1
            continue
        records = fn(chunk)
        write_parquet(records, part)
        frames.append(records)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if finalize is not None:
        out = finalize(out)
    write_parquet(out, out_path)
    shutil.rmtree(parts_dir, ignore_errors=True)
    out.attrs["resumed_chunks"] = resumed
    return out
