"""The beam search's optional attention kernel: each prompt's KV kept once rather than once per
beam (docs/hf-backend.md).

Without it every beam step carries the whole sequence's KV per beam, and re-selecting and
appending to that cache copies prompt-length KV for all rows twice a step, which dominated the
time (benchmarks/bench_beam.py). With it the per-beam cache holds the generated tokens only,
and `shared_prefix_attention` attends over the prompt's KV (`prompt_kv`) and then those.

It needs transformers internals that have no public contract: registering an attention
function and its mask (`AttentionInterface`, `masking_utils.ALL_MASK_ATTENTION_FUNCTIONS`,
`AttentionMaskInterface`), switching a model's attention (`set_attn_implementation`,
`_can_set_attn_implementation`, `config._attn_implementation`) and reading a cache's per-layer
tensors (`DynamicCache.layers[i].keys`). `supported` checks all of them, and the model's
attention, before a search uses the kernel; otherwise the search runs the plain full cache,
which gives the same beams (tests/test_models_hf.py).
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import cache
from typing import Any

from selfknow.models.hf.compat import base_class, takes_position_ids

NAME = "selfknow_shared_prefix"


def _interfaces():
    """transformers' attention and mask registries, or None where this release lacks them."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError:
        return None
    return AttentionInterface, AttentionMaskInterface, ALL_MASK_ATTENTION_FUNCTIONS


@cache
def _cache_has_layers() -> bool:
    """Whether a DynamicCache exposes its per-layer key and value tensors (`prompt_kv`)."""
    try:
        from transformers import DynamicCache
    except ImportError:
        return False
    return hasattr(DynamicCache(), "layers")


def supported(model) -> bool:
    """Whether beam steps on `model` may use `shared_prefix_attention`: this transformers has
    the interfaces it needs (module docstring), and the model runs plain SDPA or eager softmax
    attention (no sliding window, no logit soft-capping), its attention can be switched
    (`set_attn_implementation` only warns for a model whose attention does not go through
    transformers' AttentionInterface) and it takes position ids (the per-beam cache no longer
    tells it the positions)."""
    interfaces = _interfaces()
    can_switch = getattr(base_class(model), "_can_set_attn_implementation", None)
    cfg = model.config.get_text_config()
    return (interfaces is not None and "sdpa" in interfaces[2] and _cache_has_layers()
            and hasattr(model, "set_attn_implementation") and callable(can_switch)
            and takes_position_ids(model) and can_switch()
            and getattr(cfg, "_attn_implementation", None) in ("sdpa", "eager")
            and getattr(cfg, "sliding_window", None) is None
            and getattr(cfg, "attn_logit_softcapping", None) is None)


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None,
                            dropout=0.0, **kwargs):
    """Attention of beam rows over their prompt's KV (stored once per prompt, not once per
    beam) followed by their own generated tokens' KV (`key`/`value`, from a cache that holds
    generated tokens only). Rows are prompt-major, `k` per prompt; the prompt's padding is
    masked out. The model's attention only inside `attention`, around beam steps that pass
    the prompts' KV (`prompt_kv`) as the `beam_prefix` keyword."""
    prefix = kwargs.get("beam_prefix")
    if prefix is None:  # a model whose forward does not hand its keywords to the attention
        raise RuntimeError(f"{type(module).__name__}: the shared-prefix beam attention got no "
                           "beam_prefix keyword")
    import torch

    k_pre, v_pre = prefix["keys"][module.layer_idx], prefix["values"][module.layer_idx]
    bias, k = prefix["bias"], prefix["k"]  # bias: (slots, prefix length), 0 or -inf
    rows, n_q, q_len, d = query.shape
    slots, n_kv = k_pre.shape[0], k_pre.shape[1]
    g = n_q // n_kv  # query heads per KV head (grouped-query attention)
    scale = d ** -0.5 if scaling is None else scaling
    q = query.float().reshape(slots, k, n_kv, g, d)
    s_pre = torch.einsum("skhgd,shwd->skhgw", q, k_pre.float()) * scale
    s_pre = s_pre + bias[:, None, None, None, :]
    kg = key.float().reshape(slots, k, n_kv, -1, d)
    s_gen = torch.einsum("skhgd,skhtd->skhgt", q, kg) * scale
    w = torch.softmax(torch.cat([s_pre, s_gen], -1), -1)
    width = k_pre.shape[2]
    out = torch.einsum("skhgw,shwd->skhgd", w[..., :width], v_pre.float()) \
        + torch.einsum("skhgt,skhtd->skhgd", w[..., width:],
                       value.float().reshape(slots, k, n_kv, -1, d))
    return out.reshape(rows, 1, n_q, d).to(query.dtype), None


def prompt_kv(past, mask, k: int, device) -> dict[str, Any]:
    """The `beam_prefix` of a search from its prefill's cache `past` over the left-padded
    prompts (`mask`: 1 on real tokens): each layer's keys and values, one row per prompt, and
    the additive mask of the padding on `device`."""
    import torch

    bias = torch.zeros(mask.shape, dtype=torch.float32, device=device) \
        .masked_fill(mask.to(device) == 0, float("-inf"))
    return {"keys": [layer.keys for layer in past.layers],
            "values": [layer.values for layer in past.layers], "bias": bias, "k": k}


def keep_slots(prefix: dict[str, Any], kept) -> None:
    """Drop the prompt KV of the slots not in `kept` (a tensor of slot indices)."""
    for key in ("keys", "values"):
        prefix[key] = [t.index_select(0, kept) for t in prefix[key]]
    prefix["bias"] = prefix["bias"].index_select(0, kept)


@contextmanager
def attention(model):
    """Run the block with `model`'s attention set to `shared_prefix_attention` through
    transformers' `set_attn_implementation`, the model's own restored afterwards (also on
    error). Transformers picks the attention function from the model's config, with no
    per-call argument, so a beam search sets it once around all its steps."""
    AttentionInterface, AttentionMaskInterface, masks = _interfaces()
    if NAME not in masks:
        AttentionInterface.register(NAME, shared_prefix_attention)
        AttentionMaskInterface.register(NAME, masks["sdpa"])
    saved = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        yield
    finally:
        model.set_attn_implementation(saved)
