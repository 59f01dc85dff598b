"""Backends by name, config validation and `load_lm` (SPEC §0.4).

A config model entry (`spec`) names its backend; `load_lm(spec, checkpoint)` validates the entry,
resolves the checkpoint and builds the backend. Built-in backends are imported only when first
asked for, so importing the registry does not import torch or httpx.
"""
from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any, Callable

from selfknow.models.base import LM

log = logging.getLogger(__name__)

_BACKENDS: dict[str, Callable[..., LM]] = {}
# built-in backends, imported on first use (their module registers them)
_BUILTIN = {"hf": "selfknow.models.hf", "openai": "selfknow.models.openai_api"}


class UnsupportedCall(NotImplementedError):
    """The backend cannot perform this call type at all (e.g. beam search over an HTTP API)."""


class ModelSpecError(ValueError):
    """A config model entry is malformed; the message names the model and the key."""


def register_backend(name: str) -> Callable:
    """Class decorator: make a backend constructible by `load_lm` as `backend: <name>`.

    The class is called as `cls(spec, checkpoint, cache_dir=..., adapter=...)` with a validated
    spec and a resolved checkpoint dict ({name, revision?, path?}).
    """

    def deco(cls):
        _BACKENDS[name] = cls
        cls.backend = name
        return cls

    return deco


def backend_class(name: str) -> Callable[..., LM]:
    if name not in _BACKENDS and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _BACKENDS:
        known = sorted(set(_BACKENDS) | set(_BUILTIN))
        raise ModelSpecError(f"unknown backend {name!r}; known backends: {known}")
    return _BACKENDS[name]


# key -> (accepted types, description). `None` in a type tuple allows null.
_COMMON_KEYS: dict[str, tuple] = {
    "name": (str,),
    "backend": (str,),
    "checkpoints": (list,),
    "batch_size": (int,),
    "chat": (bool,),
}
_KEYS: dict[str, dict[str, tuple]] = {
    "hf": {
        "path": (str,), "hub_id": (str,), "revision": (str,), "gguf_file": (str,),
        "dtype": (str,), "device": (str,), "trust_remote_code": (bool,),
        "max_length": (int,),
    },
    "openai": {
        "base_url": (str,), "model": (str,), "api_key_env": (str,), "mode": (str,),
        "max_concurrency": (int,), "max_retries": (int,), "timeout_s": (int, float),
        "logprobs": (bool,), "echo_logprobs": (bool,), "top_logprobs": (int,),
        "backoff_s": (int, float), "max_backoff_s": (int, float), "seed": (int,),
    },
}
_CHECKPOINT_KEYS = {"name": (str,), "revision": (str,), "path": (str,), "gguf_file": (str,)}
_DTYPES = {"auto", "float32", "float16", "bfloat16"}


def validate_spec(spec: Any) -> dict:
    """Check a config model entry; return it unchanged or raise ModelSpecError naming the
    model and the offending key. Keys the backend does not know are logged, not rejected:
    other stages keep their own keys in model entries."""
    if not isinstance(spec, dict):
        raise ModelSpecError(f"model entry must be a mapping, got {type(spec).__name__}")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ModelSpecError(f"model entry {spec!r}: key 'name' must be a non-empty string")
    where = f"model {name!r}"
    backend = spec.get("backend")
    if backend not in _KEYS and backend not in _BACKENDS:
        raise ModelSpecError(f"{where}: key 'backend' must be one of "
                             f"{sorted(set(_KEYS) | set(_BACKENDS))}, got {backend!r}")
    allowed = {**_COMMON_KEYS, **_KEYS.get(backend, {})}
    for key, value in spec.items():
        if key not in allowed:
            # other stages may keep their own keys in a model entry (the config schema checks
            # those); a misspelt backend key is still worth a warning
            if backend in _KEYS:
                log.warning("%s: key %r is not used by backend %r", where, key, backend)
            continue
        if not isinstance(value, allowed[key]) or (isinstance(value, bool)
                                                    and bool not in allowed[key]):
            types = "/".join(t.__name__ for t in allowed[key])
            raise ModelSpecError(f"{where}: key {key!r} must be {types}, got {value!r}")
    for key in ("batch_size", "max_concurrency", "top_logprobs"):
        if key in spec and spec[key] < 1:
            raise ModelSpecError(f"{where}: key {key!r} must be >= 1, got {spec[key]!r}")
    if "max_retries" in spec and spec["max_retries"] < 0:
        raise ModelSpecError(f"{where}: key 'max_retries' must be >= 0")
    if "timeout_s" in spec and spec["timeout_s"] <= 0:
        raise ModelSpecError(f"{where}: key 'timeout_s' must be > 0")

    ckpts = spec.get("checkpoints", [])
    seen = set()
    for i, ck in enumerate(ckpts):
        if not isinstance(ck, dict) or not isinstance(ck.get("name"), str) or not ck["name"]:
            raise ModelSpecError(f"{where}: checkpoints[{i}] must be a mapping with a "
                                 f"non-empty string 'name', got {ck!r}")
        for key, value in ck.items():
            if key in _CHECKPOINT_KEYS and not isinstance(value, _CHECKPOINT_KEYS[key]):
                raise ModelSpecError(f"{where}: checkpoints[{i}] ({ck['name']!r}): key {key!r} "
                                     f"must be a string, got {value!r}")
        if ck["name"] in seen:
            raise ModelSpecError(f"{where}: checkpoint name {ck['name']!r} appears twice")
        seen.add(ck["name"])

    if backend == "hf":
        has_ckpt_path = bool(ckpts) and all("path" in c for c in ckpts)
        if ("path" in spec) == ("hub_id" in spec) and not has_ckpt_path:
            raise ModelSpecError(f"{where}: hf backend needs exactly one of 'path' (local dir) "
                                 f"or 'hub_id' (or a 'path' on every checkpoint)")
        if spec.get("dtype", "float32") not in _DTYPES:
            raise ModelSpecError(f"{where}: key 'dtype' must be one of {sorted(_DTYPES)}, "
                                 f"got {spec['dtype']!r}")
        dev = spec.get("device", "cpu")
        if dev not in ("cpu", "auto") and not dev.startswith("cuda"):
            raise ModelSpecError(f"{where}: key 'device' must be cpu, cuda[:n] or auto, "
                                 f"got {dev!r}")
    if backend == "openai":
        for key in ("base_url", "model"):
            if key not in spec:
                raise ModelSpecError(f"{where}: openai backend needs key {key!r}")
        if spec.get("mode", "chat") not in ("chat", "completions"):
            raise ModelSpecError(f"{where}: key 'mode' must be 'chat' or 'completions', "
                                 f"got {spec['mode']!r}")
        if spec.get("echo_logprobs") and spec.get("mode", "chat") != "completions":
            raise ModelSpecError(f"{where}: 'echo_logprobs: true' needs 'mode: completions'")
    return spec


def resolve_checkpoint(spec: dict, checkpoint: str | None) -> dict:
    """The checkpoint entry {name, revision?, path?} for `checkpoint`. A model without a
    `checkpoints` list has one checkpoint, `final`; `None` means the only (or last) one."""
    ckpts = spec.get("checkpoints") or [{"name": "final"}]
    if checkpoint is None:
        return dict(ckpts[-1])
    for ck in ckpts:
        if ck["name"] == checkpoint:
            return dict(ck)
    raise ModelSpecError(f"model {spec['name']!r}: unknown checkpoint {checkpoint!r}; "
                         f"known: {[c['name'] for c in ckpts]}")


def load_lm(
    spec: dict,
    checkpoint: str | None = None,
    *,
    cache_dir: str | os.PathLike | None,
    adapter: str | os.PathLike | None = None,
) -> LM:
    """Build the LM for one config model entry at one checkpoint, optionally with a LoRA
    adapter dir on top; every call goes through the request cache in `cache_dir` (None turns
    caching off)."""
    validate_spec(spec)
    cls = backend_class(spec["backend"])
    ck = resolve_checkpoint(spec, checkpoint)
    if adapter is not None and not Path(adapter).is_dir():
        raise ModelSpecError(f"model {spec['name']!r}: adapter dir {str(adapter)!r} not found")
    return cls(spec, ck, cache_dir=cache_dir, adapter=None if adapter is None else str(adapter))
