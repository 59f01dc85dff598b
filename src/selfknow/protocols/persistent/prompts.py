"""Prompts of the persistent-calibration protocol (persistent §3.1, §A.4, §A.7).

- QA: 5 fixed in-context examples, each "{label}: {question}\\nAnswer: {answer}", separated by
  blank lines, then the test question and "Answer:". A paper dataset's are the ones its loader
  reserves (BioASQ: those of the question's own type, factoid or list), the mini world's a
  seeded draw from the train split. The authors' code labels questions "Prompt:"; the offline
  mini world trains its models on "Question:", so the label is a parameter (`label="Prompt"`
  for the paper config).
- Verbalized confidence (§A.7, wording as printed in the paper and the authors' code):
  "Rate your confidence on a scale of 0-9, where 0 is completely uncertain and 9 is completely
  certain.\\n\\nQuestion: {q}\\nCandidate answer: {a}\\nConfidence:" — the digit read-out
  suffix ("Confidence:" vs "Confidence: ") depends on the tokenizer, see `verbalized.DigitFormat`.
- GCM: the model-agnostic grading prompt of Xiao et al. (2026) as the paper runs it (only the
  question and the candidate answer). The released GCM (`released_gcm_prompt`) ends in the
  authors' yes/no instruction and is read out as P("yes") (conset/pred_confidence_gcm.py); the
  GCM we train ourselves (`gcm_body`) ends in a 0-9 instruction and the verbalized method's
  digit read-out, because it is a LoRA digit-confidence adapter (see `baselines.py`).
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import pandas as pd

from selfknow.stages.items import has_reserved_icl, reserved_icl_examples

N_ICL = 5

#: the in-context examples of a sample's questions: one list for all, or one per question domain
Shots = Union[list[tuple[str, str]], dict[str, list[tuple[str, str]]]]

VERBALIZED_INSTRUCTION = ("Rate your confidence on a scale of 0-9, where 0 is completely "
                          "uncertain and 9 is completely certain.")

GCM_HEADER = ("You are grading responses to prompts for correctness, responses could be "
              "generated from multiple LLMs.")
GCM_INSTRUCTION = ("Please rate on a scale of 0-9 whether the Response correctly answers the "
                   "Prompt, where 0 is certainly incorrect and 9 is certainly correct.")
#: the released GCM's instruction (its trailing space included) and the token read out
RELEASED_GCM_INSTRUCTION = ("Please respond just 'yes' or 'no' in lowercase if the Response "
                            "correctly answers the Prompt: ")
GCM_YES = "yes"


def select_icl_examples(train: pd.DataFrame, n: int = N_ICL, seed: int = 17, *,
                        question_col: str = "question", answer_col: str = "answer"
                        ) -> list[tuple[str, str]]:
    """`n` fixed (question, answer) in-context examples (§3.1: "5 fixed in-context examples
    from the respective dataset"). A paper dataset's loader reserves them as the rows with
    split "icl", in the authors' order (`selfknow.stages.datasets`): the first `n` of those. Otherwise
    (the mini world) the train split shuffled with `seed`, deduplicated by question (first
    occurrence kept), first `n` taken. Stripped strings."""
    for c in (question_col, answer_col):
        if c not in train.columns:
            raise ValueError(f"train split lacks column {c!r}; has {list(train.columns)}")
    reserved = reserved_icl_examples(train, n)
    if reserved is not None:
        return reserved
    perm = np.random.default_rng(seed).permutation(len(train))
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i in perm:
        q = str(train[question_col].iloc[i]).strip()
        a = train[answer_col].iloc[i]
        if q in seen or a is None or not str(a).strip():
            continue
        seen.add(q)
        out.append((q, str(a).strip()))
        if len(out) == n:
            return out
    raise ValueError(f"train split has only {len(out)} distinct answered questions; need {n}")


def question_shots(train: pd.DataFrame, domains: Sequence[str], n: int = N_ICL, seed: int = 17, *,
                   by_domain: bool) -> Shots:
    """The in-context examples of questions of `domains`: with `by_domain` (a dataset whose
    loader reserves them per question type, `selfknow.stages.items.icl_by_domain`) each
    domain's first `n` reserved examples, {domain: examples}; otherwise one list for all
    (`select_icl_examples`), which is also what train items without reserved examples give
    (the plan's stand-ins). No examples when `n` is 0."""
    if not n:
        return []
    if by_domain and has_reserved_icl(train):
        return {d: reserved_icl_examples(train, n, d) for d in sorted(set(map(str, domains)))}
    return select_icl_examples(train, n, seed)


def qa_prompts(questions: Sequence[str], domains: Sequence[str], shots: Shots, *,
               label: str = "Question") -> list[str]:
    """`qa_prompt` of each question with `shots`: the shared list, or (a dict) its domain's."""
    if isinstance(shots, dict):
        missing = sorted(set(map(str, domains)) - set(shots))
        if missing:
            raise ValueError(f"no in-context examples of domain(s) {missing}; have {sorted(shots)}")
        return [qa_prompt(q, shots[str(d)], label=label) for q, d in zip(questions, domains)]
    return [qa_prompt(q, shots, label=label) for q in questions]


def qa_prompt(question: str, icl_examples: Sequence[tuple[str, str]], *,
              label: str = "Question") -> str:
    """Few-shot QA prompt: the in-context examples, a blank line between blocks, then
    "{label}: {question}\\nAnswer:" (the answer is generated after the colon and stops at the
    first newline)."""
    blocks = [f"{label}: {q}\nAnswer: {a}" for q, a in icl_examples]
    blocks.append(f"{label}: {str(question).strip()}\nAnswer:")
    return "\n\n".join(blocks)


def verbalized_body(question: str, answer: str) -> str:
    """The verbalized-confidence prompt up to (not including) the "Confidence:" line (§A.7)."""
    return f"{VERBALIZED_INSTRUCTION}\n\nQuestion: {question}\nCandidate answer: {answer}"


def gcm_body(question: str, answer: str, instruction: str = GCM_INSTRUCTION) -> str:
    """The GCM's model-agnostic grading prompt (Xiao et al. 2026, as run in persistent §3.1.1):
    only the question (in the QA format) and the candidate answer, no model identity."""
    return (f"{GCM_HEADER}\n###Prompt\nQuestion: {question}\nAnswer:\n###Response\n{answer}\n"
            f"###Instruction\n{instruction}")


def released_gcm_prompt(question: str, answer: str) -> str:
    """The released GCM's user turn (conset/pred_confidence_gcm.py)."""
    return gcm_body(str(question), str(answer), RELEASED_GCM_INSTRUCTION)


PROMPT_BODIES = {"verbalized": verbalized_body, "gcm": gcm_body}


def confidence_prompt(question: str, answer: str, suffix: str, style: str = "verbalized") -> str:
    """Full read-out prompt: the `style` body, a newline, then `suffix` (e.g. "Confidence:")."""
    try:
        body = PROMPT_BODIES[style]
    except KeyError:
        raise ValueError(f"unknown confidence prompt style {style!r}; known {sorted(PROMPT_BODIES)}") from None
    return f"{body(str(question), str(answer))}\n{suffix}"
