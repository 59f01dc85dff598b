"""Prompt templates of the LCAE protocol (kept as text files beside this module)."""
from __future__ import annotations

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
