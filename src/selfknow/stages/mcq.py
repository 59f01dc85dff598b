"""Multiple-choice answering by a base (non-instruct) LM: cloze scoring of the options.

A small base LM answers "which letter?" at chance: the mini world's models learn facts as
"Question: q\\nAnswer: value", not the mapping from an option's text to its letter (measured on
the default world: letter choice 0.24 on 4 options, the options' own likelihood 0.70). So each
option's text is scored as the continuation of the question, the cloze formulation of
multiple-choice evaluation for base models (GPT-3, Brown et al. 2020, §2; the `acc` of
lm-evaluation-harness): log p(" option" | context + "Question: q\\nAnswer:"), summed over the
option's tokens, and the option probabilities are the softmax of those log-likelihoods.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from selfknow.stages.items import LETTERS
from selfknow.models.base import LM


def cloze_prompt(question: str, context: str = "") -> str:
    """The short-answer prompt an option is scored after (`context` is prepended as is)."""
    return f"{context}Question: {question}\nAnswer:"


def option_probabilities(lm: LM, questions: Sequence[str], choices: Sequence[Sequence[str]],
                         contexts: Sequence[str] | None = None) -> list[np.ndarray]:
    """For item i, the probability of each of its options (softmax over the options of the
    summed log-likelihood of " option" after `cloze_prompt(questions[i], contexts[i])`).
    Items may have different numbers of options; one `loglikelihood` call scores them all."""
    if len(questions) != len(choices) or (contexts is not None and len(contexts) != len(questions)):
        raise ValueError(f"option_probabilities: {len(questions)} questions, {len(choices)} choice lists"
                         + ("" if contexts is None else f", {len(contexts)} contexts"))
    contexts = [""] * len(questions) if contexts is None else contexts
    pairs, sizes = [], []
    for i, (q, ch, ctx) in enumerate(zip(questions, choices, contexts)):
        if len(ch) < 2:
            raise ValueError(f"option_probabilities: item {i} has {len(ch)} option(s); need at least 2")
        prompt = cloze_prompt(str(q), ctx)
        pairs += [(prompt, f" {str(c).strip()}") for c in ch]
        sizes.append(len(ch))
    lls = np.asarray(lm.loglikelihood(pairs), dtype=float)
    out, start = [], 0
    for k in sizes:
        ll = lls[start:start + k]
        p = np.exp(ll - ll.max())
        out.append(p / p.sum())
        start += k
    return out


def chosen_letter(probs: np.ndarray) -> str:
    """The option letter of the most likely option."""
    return LETTERS[int(np.argmax(probs))]


def describe(probs: np.ndarray) -> str:
    """The option probabilities as the raw record of an answer: "A=0.125 B=0.700 ..."."""
    return " ".join(f"{LETTERS[j]}={x:.3f}" for j, x in enumerate(probs))
