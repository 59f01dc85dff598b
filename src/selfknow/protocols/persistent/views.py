"""The base weights of several checkpoints of one architecture held as one model: the
multi-checkpoint LoRA training of `verbalized.train_adapter` trains one adapter through every
checkpoint's base, and a job holds one base however many checkpoints ("views") it trains on.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from selfknow.models.hf import shard_kwargs
from selfknow.models.registry import free_memory, track_base
from selfknow.records import share_as_created


class ViewWeights:
    """The base models of several checkpoints ("views") of one architecture as one model on
    the device (multi-checkpoint training, `verbalized` module doc): `use(k)` copies view k's base
    parameters into the model's own, the LoRA layers untouched, so a job holds one base
    however many views train the adapter. The views are loaded one at a time, the last first,
    so that view 0's model, the one that stays, is never alive beside another; each view's
    parameters are stored by name exactly as `from_pretrained` gave them (dtype included).

    Where the views wait (`views_in_host`): a GPU job whose views fit together in
    HOST_VIEWS_GB parks them in host memory (`HostViews`) and copies host-to-device (each
    parameter to its own GPU when `gpus` > 1 shards the base): the device memory is what one
    base must fit. Otherwise (a CPU job, whose host memory is the device memory, or views too
    large to park, e.g. Olmo 3 32B) the views go to safetensors files in a scratch directory
    (`FileViews`, under TMPDIR) and are read back through the OS page cache, so the job's host
    memory holds one base at a time. One view stores nothing. Close it (or use it as a context
    manager) to delete the scratch directory."""

    def __init__(self, model_dirs: Sequence[str], *, device: str = "cpu", dtype: str = "float32",
                 gpus: int = 0):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        sharded = device != "cpu" and gpus > 1
        self.tokenizers = [AutoTokenizer.from_pretrained(d) for d in model_dirs]
        self.store = None
        self.current = 0
        ref = None
        try:
            for k in reversed(range(len(model_dirs))):
                d = model_dirs[k]
                shard = shard_kwargs(d, gpus) if sharded and k == 0 else {}
                model = AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, dtype), **shard)
                track_base(model)
                params = dict(model.named_parameters())
                shapes = {n: p.shape for n, p in params.items()}
                buffers = {n: b.detach().cpu() for n, b in model.named_buffers()}
                if ref is None:
                    ref = (d, shapes, buffers)
                elif shapes != ref[1] or buffers.keys() != ref[2].keys() \
                        or any(not torch.equal(b, ref[2][n]) for n, b in buffers.items()):
                    raise ValueError(f"checkpoints differ in architecture: {d} and {ref[0]}; "
                                     "multi-checkpoint training needs one architecture")
                if len(model_dirs) > 1:
                    if self.store is None:  # sized from the first view loaded: they share a shape
                        view_bytes = sum(p.numel() * p.element_size() for p in params.values())
                        self.store = view_store(device, len(model_dirs), view_bytes)
                    self.store.put(k, params)
                if k:
                    del model, params
                    free_memory()  # this view's weights, before the next view's load
        except BaseException:
            self.close()
            raise
        if not sharded:
            model.to(device)
        self.model = model
        self.slots = dict(model.named_parameters())

    def use(self, k: int) -> None:
        """Give the model view `k`'s base parameters."""
        if k != self.current:
            self.store.load_into(k, self.slots)
            self.current = k

    def close(self) -> None:
        """Drop the stored views (the scratch directory of a CPU job)."""
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> "ViewWeights":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HostViews:
    """Views' base parameters parked in host memory, pinned when CUDA is there (host-to-GPU
    copies then run asynchronously)."""

    def __init__(self):
        import torch

        self.pin = torch.cuda.is_available()
        self.parked: dict[int, dict] = {}

    def put(self, k: int, params: Mapping) -> None:
        self.parked[k] = {n: p.detach().cpu().pin_memory() if self.pin else p.detach().clone()
                          for n, p in params.items()}

    def load_into(self, k: int, slots: Mapping) -> None:
        for n, p in slots.items():
            p.data.copy_(self.parked[k][n], non_blocking=True)

    def close(self) -> None:
        self.parked.clear()


class FileViews:
    """Views' base parameters in safetensors files in a scratch directory that `close` deletes,
    each view in parts of at most PART_BYTES (serialising a file copies its tensors to host
    memory: parts keep that copy small beside the one base the job holds); a load reads them
    tensor by tensor through the OS page cache."""

    PART_BYTES = 2**30

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="selfknow-views-"))
        share_as_created(self.dir)

    def _parts(self, k: int) -> list[Path]:
        return sorted(self.dir.glob(f"view{k}-*.safetensors"))

    def put(self, k: int, params: Mapping) -> None:
        from safetensors.torch import save_file

        part, size = {}, 0
        for n, p in list(params.items()) + [(None, None)]:
            if part and (n is None or size + p.numel() * p.element_size() > self.PART_BYTES):
                path = self.dir / f"view{k}-{len(self._parts(k)):05d}.safetensors"
                save_file(part, path)
                share_as_created(path)  # safetensors writes 0600 whatever the umask
                part, size = {}, 0
            if n is not None:
                part[n] = p.detach().contiguous()
                size += p.numel() * p.element_size()

    def load_into(self, k: int, slots: Mapping) -> None:
        from safetensors import safe_open

        for path in self._parts(k):
            with safe_open(path, framework="pt") as f:
                for n in f.keys():
                    slots[n].data.copy_(f.get_tensor(n))

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


#: GB of views a GPU job parks in host memory at most (`views_in_host`): every 7-8B view set of
#: the paper config (4 views x 15 GB in bf16) fits, and a job still asks for no more host memory
#: than a GPU node has per GPU (512 GB-2 TB for 4-8 GPUs); Olmo 3 32B's views (64 GB each) do
#: not, and wait in scratch files. A memory setting, not a config key: the training is the same.
HOST_VIEWS_GB = 128


def views_in_host(device: str, n_views: int, view_bytes: float) -> bool:
    """Whether the `n_views` views (`view_bytes` each) of a multi-checkpoint run wait in host
    memory: on a GPU device, when they fit together in HOST_VIEWS_GB; else in scratch files. The
    job's memory request follows the same rule (rules/persistent_common.smk, get_variant_bases)."""
    return device != "cpu" and n_views * view_bytes <= HOST_VIEWS_GB * 1e9


def view_store(device: str, n_views: int, view_bytes: float) -> HostViews | FileViews:
    """Where the views of a multi-checkpoint run wait (`ViewWeights`, `views_in_host`)."""
    return HostViews() if views_in_host(device, n_views, view_bytes) else FileViews()
