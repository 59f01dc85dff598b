"""Model backends behind one interface (SPEC §0.4): `load_lm(spec, checkpoint, cache_dir=...)`.

Importing this package is cheap: torch/transformers/httpx load only when a backend is built.
"""
from selfknow.models.base import LM, Beam, CallStats, Generation, LogprobsUnavailable
from selfknow.models.registry import (
    ModelSpecError,
    UnsupportedCall,
    backend_class,
    estimate_mem_mb,
    free_memory,
    load_lm,
    register_backend,
    resolve_checkpoint,
    track_base,
    validate_spec,
)
from selfknow.runlog import RESIDENCY, residency_summary


__all__ = [
    "LM", "Beam", "CallStats", "Generation", "LogprobsUnavailable", "ModelSpecError",
    "UnsupportedCall", "backend_class", "load_lm", "register_backend", "resolve_checkpoint",
    "validate_spec", "RESIDENCY", "estimate_mem_mb", "free_memory", "residency_summary",
    "track_base",
]
