"""Resumable, chunked record generation.

A generation job writes each finished chunk of items to `<output>.parts/` atomically before
starting the next; a killed job, rerun, reads the finished chunks back and computes only the
rest, so no record is lost or duplicated. The chunk file names carry a fingerprint of the
chunk's item ids and of the job's parameters, so parts left by a different job are ignored.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable

import pandas as pd
from tqdm import tqdm

from selfknow.records import write_parquet


def _fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def map_chunks(
    items: pd.DataFrame,
    fn: Callable[[pd.DataFrame], pd.DataFrame],
    out_path: str | Path,
    *,
    chunk_size: int = 128,
    params: dict | None = None,
    key: str = "item_id",
    desc: str = "records",
    finalize: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Apply `fn` to consecutive chunks of `items`, checkpointing each chunk's records, then
    write their concatenation (passed through `finalize`) to `out_path` atomically and remove
    the parts. `key` names the column that identifies a record in the chunk fingerprints."""
    out_path = Path(out_path)
    parts_dir = out_path.with_name(out_path.name + ".parts")
    parts_dir.mkdir(parents=True, exist_ok=True)
    job = _fingerprint(params or {})
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
