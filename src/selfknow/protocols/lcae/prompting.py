"""Prompt templates of the LCAE protocol (kept as text files beside this module)."""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Sequence

from selfknow.stages.items import LETTERS

PROMPTS = Path(__file__).with_name("prompts")


@cache
def template(name: str) -> str:
    path = PROMPTS / f"{name}.txt"
    if not path.exists():
        raise FileNotFoundError(f"no LCAE prompt template {path}")
    return path.read_text(encoding="utf-8")


def options_block(choices: Sequence[str]) -> str:
    return "".join(f"{LETTERS[i]}. {c}\n" for i, c in enumerate(choices))


def fill(name: str, **fields) -> str:
    if "choices" in fields:
        fields["options"] = options_block(fields.pop("choices"))
    return template(name).format(**fields).strip() + "\n"


@cache
def prompts_version() -> str:
    """A fingerprint of every template's text: part of a resumable job's identity, so that a
    job's partial records made with other prompts are not resumed."""
    h = hashlib.sha256()
    for path in sorted(PROMPTS.glob("*.txt")):
        h.update(f"{path.name}\0{path.read_text(encoding='utf-8')}\0".encode())
    return h.hexdigest()[:16]
