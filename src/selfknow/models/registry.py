"""Backends by name, config validation and `load_lm` (SPEC §0.4).

A config model entry (`spec`) names its backend; `load_lm(spec, checkpoint)` validates the entry,
resolves the checkpoint and builds the backend. Built-in backends are imported only when first
asked for, so importing the registry does not import torch or httpx.
"""
from __future__ import annotations

import copy
import gc
import importlib
import json
import logging
import math
import os
import struct
import sys
import weakref
from pathlib import Path
from typing import Any, Callable

import jsonschema

from selfknow.config import ConfigError, check_model_entry
from selfknow.models.base import LM
from selfknow.runlog import RESIDENCY
from selfknow.schema import fill_defaults, strict, subschema

log = logging.getLogger(__name__)

_BACKENDS: dict[str, Callable[..., LM]] = {}
# built-in backends, imported on first use (their module registers them)
_BUILTIN = {"hf": "selfknow.models.hf", "openai": "selfknow.models.openai_api"}


class UnsupportedCall(NotImplementedError):
    """The backend cannot perform this call type at all (e.g. beam search over an HTTP API)."""


class ModelSpecError(ConfigError):
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


def validate_spec(spec: Any) -> dict:
    """A model entry checked against the config schema's `models` item and the checks it
    cannot state (`selfknow.config.check_model_entry`), with the schema's defaults filled in:
    the one validator of model entries, for config files and for specs built in code alike.
    Raises ModelSpecError naming the model and the key."""
    if not isinstance(spec, dict):
        raise ModelSpecError(f"model entry must be a mapping, got {type(spec).__name__}")
    where = f"model {spec.get('name')!r}"
    item = subschema("models.*")
    for e in sorted(jsonschema.Draft202012Validator(item).iter_errors(spec), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(map(str, e.absolute_path))
        if e.validator == "enum":
            raise ModelSpecError(f"{where}: key {key!r} must be one of {e.validator_value}, got {e.instance!r}")
        raise ModelSpecError(f"{where}: " + (f"key {key!r}: " if key else "") + e.message)
    spec = copy.deepcopy(spec)
    fill_defaults(spec, item)
    check_model_entry(spec, where, ModelSpecError)
    return strict(spec, item, f"models[{spec['name']}].")


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
    spec = validate_spec(spec)
    cls = backend_class(spec["backend"])
    ck = resolve_checkpoint(spec, checkpoint)
    if adapter is not None and not Path(adapter).is_dir():
        raise ModelSpecError(f"model {spec['name']!r}: adapter dir {str(adapter)!r} not found")
    lm = cls(spec, ck, cache_dir=cache_dir, adapter=None if adapter is None else str(adapter))
    if "token_budgets" in spec:
        lm.token_budgets = dict(spec["token_budgets"])
    return lm


def repeats_share_requests(spec: dict, temperature: float) -> bool:
    """Whether repeats of the same generation request at `temperature` are one request and one
    cache entry for this model entry: only greedy decoding on a deterministic backend."""
    return temperature == 0 and backend_class(spec["backend"]).greedy_deterministic


# ---- memory: resident base models and the size of a job's memory request ---------------------
def track_base(model) -> None:
    """Count one load of base weights (`model`) as resident until the object is freed."""
    RESIDENCY.loads += 1
    RESIDENCY.resident += 1
    RESIDENCY.peak = max(RESIDENCY.peak, RESIDENCY.resident)
    weakref.finalize(model, RESIDENCY._released)


def free_memory() -> None:
    """Collect unreachable models (peft wrappers hold reference cycles) and return freed CUDA
    blocks to the driver, so that the next model fits where the last one was.

    The first collection that leaves no base model alive also freezes what survives it (the
    imported modules and the job's inputs: `gc.freeze`, as vLLM's engine does after its
    start-up), so later collections skip those objects: about 460,000 in a job that has
    imported torch, transformers and peft, 0.25 s a collection. Models are loaded after it
    and stay collectable."""
    gc.collect()
    if not RESIDENCY.resident and not gc.get_freeze_count():
        gc.freeze()
    torch = sys.modules.get("torch")  # never import torch just to free memory
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


#: bytes per parameter of a loaded model by config `dtype` ("auto" keeps the stored dtype,
#: at most float32)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 4}
#: what a job needs beyond the weights: the Python process with torch and transformers
#: imported, batches, activations and the KV cache
MEM_OVERHEAD_MB = 2048
#: headroom on the weights themselves: LoRA parameters with their gradients and AdamW state,
#: buffers, allocator fragmentation
MEM_WEIGHT_FACTOR = 1.25
MEM_UNKNOWN_MB = 4000  # a model whose size is unknown when the DAG is built (not yet trained)


def safetensors_params(path: str | os.PathLike) -> int:
    """Number of parameters stored in one .safetensors file, from its JSON header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def _local_params(directory: Path) -> int | None:
    files = sorted(directory.glob("*.safetensors"))
    return sum(safetensors_params(f) for f in files) if files else None


def model_params(spec: dict) -> int | None:
    """Parameter count of a model entry: its declared `params_b` (billions), else the largest
    local checkpoint's safetensors headers; None when neither is known (hub weights not yet
    downloaded, or a model the workflow has not trained yet)."""
    if "params_b" in spec:
        return int(spec["params_b"] * 1e9)
    dirs = [Path(c["path"]) for c in spec.get("checkpoints", []) if "path" in c]
    if "path" in spec:
        root = Path(spec["path"])
        dirs += [root / c["name"] for c in spec.get("checkpoints", [])] or [root]
    counts = [c for c in (_local_params(d) for d in dirs if d.is_dir()) if c is not None]
    return max(counts) if counts else None


def estimate_mem_mb(spec: dict, bases: int = 1) -> int:
    """Host memory (MB) a job holding `bases` copies of this model's base weights asks for:
    the model's explicit `mem_mb` if set, else weight bytes (parameters x bytes of the loaded
    `dtype`) x `bases` x MEM_WEIGHT_FACTOR plus MEM_OVERHEAD_MB; MEM_UNKNOWN_MB when the size
    cannot be known yet (`model_params`)."""
    if "mem_mb" in spec:
        return int(spec["mem_mb"])
    params = model_params(spec)
    if params is None:
        return MEM_UNKNOWN_MB
    weight_mb = params * DTYPE_BYTES[spec.get("dtype", "float32")] / 2**20
    return int(math.ceil(weight_mb * bases * MEM_WEIGHT_FACTOR + MEM_OVERHEAD_MB))
