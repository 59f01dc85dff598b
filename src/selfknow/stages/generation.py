"""Answer generation, the shared stage (SPEC §0.2): greedy short answers and MCQ letters.

Base LMs get the few-shot completion prompt they were trained on ("Question: q\\nAnswer: a")
and answer MCQs by cloze scoring of the options (`selfknow.stages.mcq`); instruct models get the same
question as a chat turn asking for a short answer or the option letter. Each record
keeps the prompt, the raw text, the parsed answer (None = unparsed) and token counts.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from selfknow.stages.items import reserved_icl_examples
from selfknow.stages.judge import exact_match, letter_match, parse_option_letter
from selfknow.stages.mcq import chosen_letter, cloze_prompt, describe, option_probabilities
from selfknow.models.base import LM

CHAT_QA = "Answer the question with a short answer only (a few words), no explanation.\n\nQuestion: {question}"
CHAT_MCQ = "Answer the multiple-choice question with the letter of the correct option only.\n\nQuestion: {question}\n{options}"


def qa_prompt(question: str, shots: list[tuple[str, str]]) -> str:
    return "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots) + f"Question: {question}\nAnswer:"


def fixed_shots(train: pd.DataFrame, n_shots: int, seed: int) -> list[tuple[str, str]]:
    """`n_shots` fixed in-context examples from the train split (persistent §3.1: 5): a paper
    dataset's reserved ones, else a seeded draw."""
    reserved = reserved_icl_examples(train, n_shots)
    if reserved is not None:
        return reserved
    pool = train.sort_values("item_id")
    idx = np.random.default_rng(seed).choice(len(pool), size=min(n_shots, len(pool)), replace=False)
    return [(pool["question"].iloc[i], pool["answer"].iloc[i]) for i in sorted(idx)]


def _options(choices) -> str:
    return "".join(f"{chr(65 + i)}. {c}\n" for i, c in enumerate(choices))


def greedy_answers(lm: LM, items: pd.DataFrame, *, shots: list[tuple[str, str]], chat: bool,
                   max_new_tokens: int) -> pd.DataFrame:
    """Greedy answers to short-answer or MCQ items, judged against the references."""
    is_mcq = items["choices"].notna().all()
    if is_mcq and not chat:
        probs = option_probabilities(lm, list(items["question"]), [list(c) for c in items["choices"]])
        prompts = [cloze_prompt(q) for q in items["question"]]
        raw = [describe(p) for p in probs]
        answers = [chosen_letter(p) for p in probs]
        t_in, t_out = [len(p.split()) for p in prompts], [0] * len(prompts)
    else:
        if chat:
            tmpl = CHAT_MCQ if is_mcq else CHAT_QA
            prompts = [tmpl.format(question=q, options=_options(c) if is_mcq else "")
                       for q, c in zip(items["question"], items["choices"])]
        else:
            prompts = [qa_prompt(q, shots) for q in items["question"]]
        gens = lm.generate(prompts, max_new_tokens=max_new_tokens, stop=None if chat else ["\n"], chat=chat)
        raw = [g.text for g in gens]
        if is_mcq:
            answers = [parse_option_letter(t, len(c)) for t, c in zip(raw, items["choices"])]
        else:
            answers = [t.strip().split("\n")[0].strip() or None for t in raw]
        t_in, t_out = [g.tokens_in for g in gens], [g.tokens_out for g in gens]
    if is_mcq:
        correct = [letter_match(a, r) for a, r in zip(answers, items["answer"])]
    else:
        correct = [exact_match(a, al) for a, al in zip(answers, items["aliases"])]
    return pd.DataFrame({"item_id": items["item_id"].values, "domain": items["domain"].values, "prompt": prompts,
                         "raw": raw, "answer": answers, "unparsed": [a is None for a in answers],
                         "correct": correct, "tokens_in": t_in, "tokens_out": t_out})
