"""Outputs are as readable as the user's umask says, weights included: the safetensors library
writes every file 0600 whatever the umask, so each writer of weights (world checkpoints,
adapters, the converted SmolLM2, scratch views) gives its files the mode `open` would have."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from model_fixtures import build_lora_adapter, build_tiny_gpt2


@pytest.fixture
def group_umask():
    old = os.umask(0o002)
    yield
    os.umask(old)


def _unreadable(root: Path) -> list[str]:
    """Files of `root` the group cannot read, directories it cannot enter."""
    bad = []
    for p in [root, *root.rglob("*")]:
        mode = p.stat().st_mode
        need = stat.S_IRGRP | (stat.S_IXGRP if p.is_dir() else 0)
        if mode & need != need:
            bad.append(f"{p.relative_to(root.parent)} {oct(mode & 0o777)}")
    return bad


def test_share_tree_gives_every_file_the_umask_mode(tmp_path, group_umask):
    from selfknow.records import share_tree

    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    for f in (d / "a.safetensors", d / "sub" / "b.json"):
        f.write_text("x")
        f.chmod(0o600)
    (d / "sub").chmod(0o700)
    share_tree(d)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in d.rglob("*")} == {
        "sub": "0o775", "a.safetensors": "0o664", "b.json": "0o664"}


def test_world_checkpoints_are_group_readable(tmp_path, group_umask):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfknow.world.trainer import _save_checkpoint

    src = build_tiny_gpt2(tmp_path / "src")
    out = _save_checkpoint(AutoModelForCausalLM.from_pretrained(src), AutoTokenizer.from_pretrained(src),
                           tmp_path / "family", "phase1")
    assert list(out.glob("*.safetensors")) and not _unreadable(out)


def test_adapters_are_group_readable(tmp_path, group_umask):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from selfknow.protocols.persistent.verbalized import _save_atomic

    base = build_tiny_gpt2(tmp_path / "base")
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base),
                                     build_lora_adapter(base, tmp_path / "lora"))
    out = tmp_path / "adapters" / "a"
    _save_atomic(peft, out, {"training.json": {"seed": 0}})
    assert list(out.glob("*.safetensors")) and not _unreadable(out)


def test_scratch_views_are_group_readable(group_umask):
    import torch

    from selfknow.protocols.persistent.views import FileViews

    views = FileViews()
    try:
        views.put(0, {"w": torch.zeros(3)})
        assert views._parts(0) and not _unreadable(views.dir)
    finally:
        views.close()


@pytest.mark.slow
def test_converted_smollm2_is_group_readable(tmp_path, group_umask):
    import torch

    from selfknow.models.gguf_convert import convert_gguf_to_hf, smollm2_gguf_path

    torch.set_num_threads(1)
    out = convert_gguf_to_hf(smollm2_gguf_path(), tmp_path / "smollm2")
    assert list(out.glob("*.safetensors")) and not _unreadable(out)


def test_every_file_of_a_tiny_run_is_group_readable(tiny_run):
    """tiny_run runs the workflow under umask 002 (tests/conftest.py)."""
    weights = list(tiny_run.rglob("*.safetensors"))
    assert weights, "the tiny run wrote no weights"
    assert not _unreadable(tiny_run)
