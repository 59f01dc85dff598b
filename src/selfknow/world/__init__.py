"""The offline mini world: a synthetic knowledge world and small GPT-2-style LMs trained on it.

Heavy imports (torch, transformers) live in ``trainer`` and ``probe`` only.
"""
from selfknow.world.generator import DEFAULT_WORLD, generate_world, mcq_prompt, qa_prompt

__all__ = ["DEFAULT_WORLD", "generate_world", "mcq_prompt", "qa_prompt"]
