"""A job whose local weights change on disk reruns: its params hold a content fingerprint of
the weights it loads (rules/common.smk, model_weights), computed once per file and cached."""
from __future__ import annotations

import os

import pytest
import yaml

from conftest import REPO, run_snakemake
from model_fixtures import build_tiny_gpt2
from selfknow.models.fingerprint import weights_fingerprint
from test_plan import _write_items


def test_fingerprint_follows_content_and_reads_a_file_once(tmp_path, monkeypatch):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"a" * 100)
    (d / ".partial.tmp").write_bytes(b"ignored")
    cache = tmp_path / "cache"
    first = weights_fingerprint(d, cache)
    assert len(list(cache.rglob("*"))) == 2  # one digest entry in its shard directory
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    assert weights_fingerprint(d, cache) == first and not [p for p in opened if p.endswith(".safetensors")]
    monkeypatch.undo()
    (d / ".partial.tmp").write_bytes(b"still ignored")
    assert weights_fingerprint(d, cache) == first
    (d / "model.safetensors").write_bytes(b"b" * 100)  # same size, new content
    assert weights_fingerprint(d, cache) != first


@pytest.fixture
def local_model_config(tmp_path):
    """An LCAE config on 3 items with one local hf model (a tiny GPT-2 at a `path:`)."""
    results = tmp_path / "results"
    _write_items(results, "mc", 2, 3, mcq=True)
    model = build_tiny_gpt2(tmp_path / "tiny")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "seed": 1, "results": str(results),
        "models": [{"name": "tiny", "backend": "hf", "path": str(model), "device": "cpu"}],
        "datasets": {"mc": {"loader": "mmlu", "path": str(tmp_path), "subjects": ["x"], "subject_range": [0, 3]}},
        "lcae": {"dataset": "mc", "n_items": 3, "strategies": ["standard"], "examinee_models": ["tiny"],
                 "repeats": 1, "conditions": ["baseline"]}}))
    return path, results, model


@pytest.mark.slow
def test_a_job_reruns_when_its_local_weights_change(local_model_config):
    import torch
    from safetensors.torch import load_file, save_file

    config, results, model = local_model_config
    target = str(results / "lcae" / "stage1" / "tiny" / "final.parquet")
    args = (target, "--configfile", str(config), "--cores", "1")
    run_snakemake(*args)
    assert "Nothing to be done" in run_snakemake(*args, "-n").stdout
    weights = model / "model.safetensors"
    tensors = load_file(weights)
    save_file({k: v + 0.01 if v.is_floating_point() else v for k, v in tensors.items()}, weights,
              metadata={"format": "pt"})
    dry = run_snakemake(*args, "-n")
    assert "lcae_stage1" in dry.stdout and "params" in dry.stdout.lower(), dry.stdout[-3000:]
    assert torch.equal(load_file(weights)["transformer.wte.weight"], tensors["transformer.wte.weight"] + 0.01)
    assert os.path.isdir(results / "cache" / "fingerprints")
