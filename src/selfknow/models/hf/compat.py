"""What the `hf` backend asks of a transformers model and tokenizer beyond their documented
calls, each looked up rather than assumed, so a release that renames or drops one takes the
plain path instead of failing (docs/hf-backend.md lists them).

- the forward's argument names (`forward_params`): the KV cache argument (`cache` from
  transformers 5.24, `past_key_values` before), `position_ids`, `logits_to_keep`;
- the fast tokenizer's Rust backend (`tok._tokenizer`): one call decodes many sequences
  (`decode_many`), and a byte-level decoder gives each token's bytes (`byte_level_table`);
  without it, the tokenizer's own `decode`, one sequence at a time.
"""
from __future__ import annotations

import inspect
import json
from typing import Any

_FORWARD_PARAMS: dict[type, frozenset] = {}


def base_class(model) -> type:
    """The class of the model under a peft wrapper (the model's own class without one)."""
    return type(model.get_base_model() if hasattr(model, "get_base_model") else model)


def forward_params(model) -> frozenset:
    """Names of the arguments of the (peft-wrapped) model's forward, cached per class."""
    cls = base_class(model)
    if cls not in _FORWARD_PARAMS:
        _FORWARD_PARAMS[cls] = frozenset(inspect.signature(cls.forward).parameters)
    return _FORWARD_PARAMS[cls]


def cache_kwarg(model) -> str:
    """Name of the forward argument taking the KV cache (renamed in transformers 5.24)."""
    return "cache" if "cache" in forward_params(model) else "past_key_values"


def kv_cache(out):
    """The KV cache of a forward output: `cache` from transformers 5.24, else
    `past_key_values`."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def takes_position_ids(model) -> bool:
    """Whether the forward takes explicit position ids (left padding and a cached prefix need
    them)."""
    return "position_ids" in forward_params(model)


def last_logits_only(model) -> dict[str, Any]:
    """`logits_to_keep=1` where the model takes it: a prefill then skips the LM head for all
    but the last position (a vocabulary-sized matmul per prompt token)."""
    return {"logits_to_keep": 1} if "logits_to_keep" in forward_params(model) else {}


def _rust_backend(tok):
    """The fast tokenizer's Rust `tokenizers.Tokenizer`, when decoding through it is the same
    as `tok.decode` (no post-decode space clean-up); else None."""
    backend = getattr(tok, "_tokenizer", None)
    if backend is None or getattr(tok, "clean_up_tokenization_spaces", False):
        return None
    return backend


def decode_many(tok, seqs: list[list[int]]) -> list[str]:
    """`tok.decode(s, skip_special_tokens=True)` for each sequence, in one call into the Rust
    tokenizer where that is the same."""
    backend = _rust_backend(tok)
    if backend is not None and hasattr(backend, "decode_batch"):
        return backend.decode_batch(seqs, skip_special_tokens=True)
    return [tok.decode(s, skip_special_tokens=True) for s in seqs]


def _gpt2_byte_chars() -> dict[str, int]:
    """Inverse of the GPT-2 byte-level alphabet: printable bytes stand for themselves, the
    others for the characters 256, 257, ... in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
            *range(ord("\xae"), ord("\xff") + 1)]
    chars = {chr(b): b for b in keep}
    extra = 0
    for b in range(256):
        if b not in keep:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def byte_level_table(tok) -> list[bytes] | None:
    """Bytes of each token id under `decode(..., skip_special_tokens=True)` (b"" for skipped
    special tokens) when the tokenizer's decoder is plain byte-level (GPT-2, OLMo, SmolLM2),
    else None; checked token by token against the tokenizer. Joining bytes and decoding them
    in Python (what a byte-level decoder does, U+FFFD for invalid UTF-8) is ~20x faster than
    the tokenizer's decode of each sequence."""
    backend = _rust_backend(tok)
    if backend is None:
        return None
    try:
        cfg = json.loads(backend.to_str())
    except Exception:  # a tokenizer that cannot serialise itself: decode the slow way
        return None
    if (cfg.get("decoder") or {}).get("type") != "ByteLevel":
        return None
    inv = _gpt2_byte_chars()
    special = {a["id"] for a in cfg.get("added_tokens", []) if a.get("special")}
    n = backend.get_vocab_size(with_added_tokens=True)
    table = []
    for t in range(n):
        piece = backend.id_to_token(t)
        if piece is None:
            return None
        table.append(b"" if t in special else
                     b"".join(bytes([inv[c]]) if c in inv else c.encode() for c in piece))
    alone = backend.decode_batch([[t] for t in range(n)], skip_special_tokens=True)
    if any(b.decode("utf-8", "replace") != a for a, b in zip(alone, table)):
        return None
    return table
