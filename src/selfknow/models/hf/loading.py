"""Weights of the `hf` backend: where a checkpoint comes from, how it is placed, and the one
resident copy of a base that its LMs share.

LMs of one base checkpoint in a process share one copy of its weights (`ResidentBase`); their
adapters are loaded, switched and dropped on it with peft's multi-adapter API, with outputs
equal to those of a model loaded alone with that adapter. `HFLM.release()` frees a base (then
`gc` and the CUDA cache; without it the base goes with the last LM using it), and the job log
reports the base loads and the most bases alive at once (`registry.track_base`). A model with
`gpu` > 1 on CUDA is sharded over those GPUs by accelerate (`shard_kwargs`).
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Callable, Sequence

from selfknow.models.registry import ModelSpecError, free_memory

# share of each GPU a sharded model's weights may fill; the rest holds activations and the
# KV cache of a batch (`batch_size` prompts x beams)
GPU_MEMORY_FRACTION = 0.85


def shard_kwargs(name: str, n_gpus: int, gpu_bytes: Sequence[int] | None = None) -> dict:
    """`from_pretrained` arguments that spread model `name` over `n_gpus` GPUs with accelerate
    (`device_map="auto"`), each filled to GPU_MEMORY_FRACTION of its memory (`gpu_bytes`;
    default: the visible devices' total memory)."""
    if gpu_bytes is None:
        import torch

        gpu_bytes = [torch.cuda.get_device_properties(i).total_memory
                     for i in range(min(n_gpus, torch.cuda.device_count()))]
    if len(gpu_bytes) < n_gpus:
        raise ModelSpecError(f"model {name!r}: gpu: {n_gpus} asks for a model sharded over "
                             f"{n_gpus} GPUs but {len(gpu_bytes)} CUDA device(s) are visible")
    return {"device_map": "auto",
            "max_memory": {i: int(b * GPU_MEMORY_FRACTION) for i, b in enumerate(gpu_bytes[:n_gpus])}}


class ResidentBase:
    """The one resident copy of a base checkpoint's weights in this process, with the LoRA
    adapters loaded on it by peft's multi-adapter API (`load_adapter` / `set_adapter` /
    `delete_adapter`): switching adapters costs no reload, and a model without an adapter
    runs with the adapter layers disabled (their base layers alone, bit for bit the plain
    model)."""

    def __init__(self, model, sharded: bool, device: str):
        self.model = model
        self.sharded, self.device = sharded, device
        self.adapters: set[str] = set()
        self.active: str | None = None

    def activate(self, path: str | None, name: str | None):
        """The model with adapter `name` (loaded from `path` on first use) active, or with
        no adapter active when `name` is None."""
        if name is None:
            if self.active is not None:
                self.model.base_model.disable_adapter_layers()
                self.active = None
            return self.model
        if name not in self.adapters:
            if not self.adapters:
                from peft import PeftModel

                self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name)
            else:
                self.model.load_adapter(path, adapter_name=name)
            if not self.sharded:  # a sharded base's adapter layers sit on their layer's GPU
                self.model.to(self.device)
            self.model.eval()
            self.adapters.add(name)
            self.active = None
        if self.active != name:
            self.model.base_model.enable_adapter_layers()
            self.model.set_adapter(name, inference_mode=True)  # frozen, as when loaded alone
            self.active = name
        return self.model

    def drop(self, name: str) -> None:
        """Delete adapter `name`; without adapters left, the plain base model again."""
        if name not in self.adapters:
            return
        self.adapters.discard(name)
        if self.adapters:
            if self.active == name:
                self.model.base_model.disable_adapter_layers()
                self.active = None
            self.model.delete_adapter(name)
        else:
            self.model = self.model.unload()
            self.active = None


#: base key (`HFLM._base_key`) -> its resident weights, alive while an LM of it is
_RESIDENT: "weakref.WeakValueDictionary[tuple, ResidentBase]" = weakref.WeakValueDictionary()


def resident_base(key: tuple, load: Callable[[], ResidentBase]) -> ResidentBase:
    """The resident weights of base `key`, loaded by `load` when no LM holds them."""
    base = _RESIDENT.get(key)
    if base is None:
        free_memory()  # what earlier released LMs left behind, before the next load
        base = _RESIDENT[key] = load()
    return base


def release_base(key: tuple, base: ResidentBase | None) -> None:
    """Free base `key`'s weights (`base`, or the resident copy) for every LM of it."""
    base = base or _RESIDENT.get(key)
    if base is not None:
        base.model = None
        _RESIDENT.pop(key, None)
        free_memory()


def release_bases() -> None:
    """Free every resident base model of this process."""
    for base in list(_RESIDENT.values()):
        base.model = None
    _RESIDENT.clear()
    free_memory()


@contextmanager
def hub_resolution(name: str, checkpoint: str, hub_id: str, revision: str | None):
    """Turn a hub id or revision that cannot be resolved in the block (a typo, a revision the
    repository lacks, a gated or private repository, weights missing from the local cache under
    HF_HUB_OFFLINE=1, an unreachable hub) into a ModelSpecError naming the model entry, the hub id
    and the revision, with the hub's reason; transformers and huggingface_hub raise these as
    OSErrors without an errno (an errno means a local file-system error, passed on as it is)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError

    try:
        yield
    except (OSError, HFValidationError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise
        where = "the local Hugging Face cache (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else "the hub"
        reason = " ".join(str(err).split())[:300]
        raise ModelSpecError(f"model {name!r} checkpoint {checkpoint!r}: hub id {hub_id!r} at revision "
                             f"{revision or 'main'!r} cannot be resolved from {where} (keys 'hub_id', "
                             f"'revision'): {type(err).__name__}: {reason}") from None
