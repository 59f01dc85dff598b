"""Token-level JSON-schema constraint for the `hf` backend's `generate` (structured output).

A flat schema (an object whose properties are all required, no others allowed, each a
probability `{"type": "number", "minimum": 0, "maximum": 1}` or a string `enum`) becomes the
regular language of its compact serialisation (`schema_regex`): keys in `required` order,
`json.dumps` spacing, probabilities as 0, 1, or 0.d / 1.0 with one to three decimals. A logits
processor then leaves finite only the tokens whose text keeps each row's reply a prefix of that
language, and EOS once it is complete (lm-format-enforcer's regex parser walks the tokenizer's
prefix tree). Every completed reply is therefore an instance of its schema, bounds included,
and a reply has a bounded length. lm-format-enforcer's JSON-schema parser would not do: it
enforces neither numeric bounds nor a number's length, and a small model then writes
"0.4767587877..." until the token limit (measured on a tiny random GPT-2: 3 of 16 replies cut).

lm-format-enforcer's own transformers integration imports names that transformers 5 no longer
has, so the tokenizer table it needs is built here (`enforcer_tokenizer_data`).
"""
from __future__ import annotations

import json
import re
from typing import Sequence

#: a probability written with at most three decimals
_PROBABILITY = r"(0|1|0\.[0-9]{1,3}|1\.0{1,3})"


def _value_regex(key: str, schema: dict) -> str:
    if "enum" in schema and schema.get("type", "string") == "string":
        return "(" + "|".join(re.escape(json.dumps(str(v))) for v in schema["enum"]) + ")"
    if schema.get("type") == "number" and (schema.get("minimum"), schema.get("maximum")) == (0, 1):
        return _PROBABILITY
    raise ValueError(f"JSON schema property {key!r}: only probabilities (number, minimum 0, "
                     f"maximum 1) and string enums can be constrained, got {schema}")


def schema_regex(schema: dict) -> str:
    """The regular expression of the compact serialisation of a flat object schema (module
    docstring); ValueError naming the offending key for anything else."""
    props = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    if schema.get("type") != "object" or not props:
        raise ValueError(f"JSON schema: an object with properties is needed, got {schema}")
    if schema.get("additionalProperties") is not False or sorted(required) != sorted(props):
        raise ValueError("JSON schema: every property must be required and "
                         "additionalProperties false (a fixed set of keys)")
    body = ", ".join(re.escape(json.dumps(k) + ": ") + _value_regex(k, props[k])
                     for k in required)
    return r"\{" + body + r"\}"


def enforcer_tokenizer_data(tok, vocab_size: int, eos_ids: Sequence[int]):
    """lm-format-enforcer's per-tokenizer data: (id, text, starts a word) of every
    non-special token below `vocab_size`, a decoder and the EOS ids."""
    from lmformatenforcer.tokenenforcer import TokenEnforcerTokenizerData

    special = set(tok.all_special_ids)
    ids = [i for i in range(min(vocab_size, len(tok))) if i not in special]
    # A token's text after another token keeps the leading space that decoding it alone
    # drops for SentencePiece word-start tokens; byte-level BPE gives the same text both ways.
    anchor = tok.encode("0", add_special_tokens=False)[-1]
    skip = len(tok.decode([anchor]))
    after = tok.batch_decode([[anchor, i] for i in ids])
    alone = tok.batch_decode([[i] for i in ids])
    regular = [(i, a[skip:], len(a) - skip > len(b)) for i, a, b in zip(ids, after, alone)]

    def decode(token_ids: list[int]) -> str:
        # a trailing partial UTF-8 character is not text yet
        return tok.decode(token_ids).rstrip("\ufffd")

    return TokenEnforcerTokenizerData(regular, decode, sorted(eos_ids), False, vocab_size)


class SchemaLogitsProcessor:
    """A transformers logits processor: row r of a batch may only continue its reply (the
    tokens after column `prompt_width`) within `schema_regex(schemas[r])`. A row that has
    emitted EOS is left alone (generate pads it whatever comes next)."""

    def __init__(self, tokenizer_data, schemas: Sequence[dict], prompt_width: int,
                 eos_ids: Sequence[int]):
        from lmformatenforcer import RegexParser, TokenEnforcer

        self.enforcers = [TokenEnforcer(tokenizer_data, RegexParser(schema_regex(s)))
                          for s in schemas]
        self.prompt_width = prompt_width
        self.eos = set(eos_ids)

    def __call__(self, input_ids, scores):
        import torch

        mask = torch.full_like(scores, float("-inf"))
        for r, enforcer in enumerate(self.enforcers):
            generated = input_ids[r, self.prompt_width:].tolist()
            if self.eos.intersection(generated):
                mask[r] = 0.0
                continue
            # no token continues the reply when the tokenizer cannot spell what must come next
            # (a key with a character it lacks): the reply ends there, unparsable and counted
            allowed = enforcer.get_allowed_tokens(generated).allowed_tokens or sorted(self.eos)
            mask[r, torch.as_tensor(allowed, dtype=torch.long, device=scores.device)] = 0.0
        return scores + mask
