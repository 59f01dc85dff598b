"""A content fingerprint of local model weights for a job's params, so that a job whose weights
changed on disk reruns (Snakemake compares params), computed once per file and cached."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from selfknow.models.cache import model_files
from selfknow.records import write_text


def weights_fingerprint(path: str | os.PathLike, cache_dir: str | os.PathLike) -> str:
    """sha256 over every regular, non-hidden file under `path` (or the file itself): its name
    relative to `path`, its size and the sha256 of its full content. Each file's content digest
    is cached in `cache_dir` under its (absolute path, size, mtime), so a multi-GB checkpoint
    is read once, and read again only when a file of it is rewritten."""
    h = hashlib.sha256()
    for rel, p in model_files(path):
        st = p.stat()
        h.update(f"{rel}\0{st.st_size}\0{_file_digest(p, st, Path(cache_dir))}\0".encode())
    return h.hexdigest()


def _file_digest(path: Path, st: os.stat_result, cache_dir: Path) -> str:
    key = hashlib.sha256(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    entry = cache_dir / key[:2] / key
    if entry.is_file():
        return entry.read_text(encoding="ascii").strip()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    write_text(digest.hexdigest() + "\n", entry)
    return digest.hexdigest()
