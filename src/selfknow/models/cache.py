"""Disk request cache shared by every backend (SPEC §0.4): a rerun makes zero model calls.

One request = one prompt (or one (context, continuation) pair) of one call type. Its key is the
sha256 of the canonical JSON of everything that determines the answer: backend, model id,
revision, adapter identity (path + content hash of its weights), call type, the prompt, the
decoding parameters (timeouts and retry settings are deliberately not part of it) and the
sample index. Batches are cached per request, so a batch with half hits computes only the
misses.

Storage: one JSON file per key, `<dir>/<key[:2]>/<key>.json`, written to a temporary file in the
same directory and renamed into place. Chosen over sqlite because (a) Snakemake jobs on a SLURM
cluster share the cache over NFS/Lustre where sqlite's WAL locking is unreliable, while an
atomic rename is not; (b) concurrent writers never block each other: two jobs computing the same
key write identical content and the last rename wins. Measured on the 2-core dev box under
load, 4 processes x 500 writes (half shared keys): files 306 writes/s and 2.1K reads/s; sqlite
WAL with a commit per request 148 writes/s and 8K reads/s; both are negligible next to a model
call. Each entry stores a sha256 of its canonical
response; an entry that fails to parse, has the wrong key or checksum is logged, ignored and
recomputed (then overwritten).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from selfknow.models.base import CallStats
from selfknow.records import share_as_created

log = logging.getLogger(__name__)

#: bump when the meaning of a cached response changes, so old entries miss instead of lying
CACHE_FORMAT = 1


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, floats via repr; NaN/inf spelled out."""
    return json.dumps(_canon(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _canon(obj: Any) -> Any:
    if isinstance(obj, float):
        # JSON has no inf/nan; spell them so that -inf log-probabilities round-trip
        if math.isnan(obj):
            return {"__float__": "nan"}
        if math.isinf(obj):
            return {"__float__": "inf" if obj > 0 else "-inf"}
        return obj
    if isinstance(obj, dict):
        return {str(k): _canon(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canon(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _canon(obj.item())
    return obj


def _uncanon(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__float__"}:
            return float(obj["__float__"])
        return {k: _uncanon(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_uncanon(v) for v in obj]
    return obj


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_key(request: dict) -> str:
    """sha256 of the canonical JSON of a request description (see module docstring)."""
    return sha256_text(canonical_json({"cache_format": CACHE_FORMAT, **request}))


def model_files(root: str | os.PathLike) -> list[tuple[str, Path]]:
    """(name relative to `root`, path) of every regular file under `root` (or `root` itself, a
    file), sorted, but for hidden and temporary ones ("." names), which are not the model."""
    root = Path(root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    named = [(p.name if p == root else p.relative_to(root).as_posix(), p) for p in files]
    return [(rel, p) for rel, p in named if not (rel.startswith(".") or "/." in rel)]


def hash_files(root: str | os.PathLike, *, sample_bytes: int | None = None) -> str:
    """Content hash of every regular file under `root` (names relative to it, sorted).

    With `sample_bytes`, files larger than 2 x sample_bytes contribute their size plus their
    first and last `sample_bytes` only: a cheap fingerprint for multi-GB local model dirs, where
    retraining changes every tensor. Adapter weights are always hashed in full.
    """
    h = hashlib.sha256()
    for rel, p in model_files(root):
        size = p.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with open(p, "rb") as f:
            if sample_bytes is not None and size > 2 * sample_bytes:
                h.update(f.read(sample_bytes))
                f.seek(size - sample_bytes)
                h.update(f.read(sample_bytes))
            else:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


class PartialFailure(Exception):
    """Raised by a `compute` callback when some requests of a batch succeeded and another
    failed: the successes (`done`: position in the miss list -> response) are cached before
    `error` is re-raised, so a rerun repays only the failed requests."""

    def __init__(self, done: dict[int, Any], error: BaseException):
        super().__init__(str(error))
        self.done, self.error = done, error


class RequestCache:
    """Per-request disk cache in `directory` (created on demand); `None` disables caching."""

    def __init__(self, directory: str | os.PathLike | None):
        self.directory = None if directory is None else Path(directory)

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> tuple[bool, Any]:
        """(found, response). A corrupt entry is logged and reported as not found."""
        if self.directory is None:
            return False, None
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return False, None
        try:
            entry = json.loads(raw.decode("utf-8"))
            body = canonical_json(entry["response"])
            if entry["key"] != key or entry["sha256"] != sha256_text(body):
                raise ValueError("key or checksum mismatch")
        except (ValueError, KeyError, TypeError) as err:
            log.warning("request cache: corrupt entry %s (%s); recomputing", path, err)
            return False, None
        return True, _uncanon(entry["response"])

    def put(self, key: str, request: dict, response: Any) -> None:
        if self.directory is None:
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = canonical_json(response)
        entry = ('{"key":' + json.dumps(key) + ',"sha256":' + json.dumps(sha256_text(body))
                 + ',"request":' + canonical_json(request) + ',"response":' + body + "}\n")
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            share_as_created(tmp)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(entry)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def map(
        self,
        requests: Sequence[dict],
        compute: Callable[[list[int]], Sequence[Any]],
        stats: CallStats,
    ) -> list[Any]:
        """Answer each request from the cache; call `compute(miss_indices)` once for the rest
        (it returns one JSON-able response per miss, in order), store and count them."""
        keys = [request_key(r) for r in requests]
        out: list[Any] = [None] * len(requests)
        misses: list[int] = []
        for i, key in enumerate(keys):
            found, value = self.get(key)
            if found:
                out[i] = value
            else:
                misses.append(i)
        stats.hits += len(requests) - len(misses)
        if misses:
            # identical requests inside one batch are computed once
            first: dict[str, int] = {}
            unique = [i for i in misses if first.setdefault(keys[i], i) == i]
            try:
                values = list(compute(unique))
            except PartialFailure as part:
                for j, value in part.done.items():
                    self.put(keys[unique[j]], requests[unique[j]], _uncanon(_canon(value)))
                stats.misses += len(part.done)
                raise part.error from None
            if len(values) != len(unique):
                raise RuntimeError(f"backend returned {len(values)} responses for "
                                   f"{len(unique)} requests")
            by_key = {}
            for i, value in zip(unique, values):
                value = _uncanon(_canon(value))  # what a later cache hit would return
                self.put(keys[i], requests[i], value)
                by_key[keys[i]] = value
            for i in misses:
                out[i] = by_key[keys[i]]
            stats.misses += len(unique)
            stats.hits += len(misses) - len(unique)
        return out


class CachedCalls:
    """The request-building half of caching, shared by backends: `identity()` returns the
    backend/model/revision/adapter part of every key (called once, lazily, since fingerprinting
    a local model dir reads it); `run` caches one batch call per request.
    `greedy_deterministic` says that the backend answers a temperature-0 request the same way
    every time (local greedy decoding), so that its repeats may share one entry."""

    def __init__(self, cache_dir: str | os.PathLike | None, identity: Callable[[], dict],
                 stats: CallStats, *, greedy_deterministic: bool = True):
        self.cache = RequestCache(cache_dir)
        self._identity_fn = identity
        self._identity: dict | None = None
        self.stats = stats
        self.greedy_deterministic = greedy_deterministic

    @property
    def identity(self) -> dict:
        if self._identity is None:
            self._identity = self._identity_fn()
        return self._identity

    def run(
        self,
        call: str,
        payloads: Sequence[dict],
        params: dict,
        compute: Callable[[list[int]], Sequence[Any]],
        *,
        sample_index: int = 0,
    ) -> list[Any]:
        """Answer `call` for each payload (one prompt or pair each) from the cache, computing
        the misses with `compute(miss_indices)`. `sample_index` tells repeats apart whenever
        the answer may vary: a positive `temperature` param, or a backend that is not
        `greedy_deterministic`. Only deterministic calls share one entry across repeats."""
        varies = float(params.get("temperature") or 0) > 0 or not self.greedy_deterministic
        requests = [{**self.identity, "call": call, "payload": p, "params": params,
                     "sample_index": int(sample_index) if varies else 0} for p in payloads]
        return self.cache.map(requests, compute, self.stats)
