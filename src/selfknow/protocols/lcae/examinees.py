"""Stage 1 (LCAE §III-A): answering the items under five prompting strategies.

Instruct (chat) models get the strategy's prompt and their reply is parsed for the final
option letter. Base language models (the offline default's mini-world checkpoints) cannot
follow instructions, so each strategy becomes the nearest thing a base model can do, always
choosing by cloze scoring of the options (`selfknow.stages.mcq`: the likelihood of each option's text
after "Question: q\\nAnswer:", softmax over the options) after a strategy-specific context:

- standard:  no context (zero-shot cloze choice);
- knowledge: generated-knowledge prompting: the model's own free recall of the question
             ("Question: q\\nAnswer:" greedily decoded) is prepended as "Knowledge: ...";
- cot:       answer-then-choose: the model's free recall is written as its reasoning line
             before the question is asked again;
- self_ask:  the Self-Ask scaffold with the question as the follow-up and the model's recall as
             the intermediate answer;
- tot:       three thoughts (the top-3 beams of free recall) each prepended in turn; the option
             distributions are averaged (a vote of the branches).
"""
from __future__ import annotations

import pandas as pd

from selfknow.stages.judge import final_answer_letter, letter_match
from selfknow.stages.mcq import chosen_letter, cloze_prompt, describe, option_probabilities
from selfknow.models.base import LM
from selfknow.protocols.lcae.prompting import fill

STRATEGIES = ("standard", "knowledge", "cot", "self_ask", "tot")
#: what became of a reply: an option read from it, no explicit final answer in it, or cut at
#: the token budget (then no answer is read: its last "Answer: X" may be a draft)
STATUSES = ("parsed", "unparsed", "truncated")
def answer_base(lm: LM, items: pd.DataFrame, strategy: str, max_new_tokens: int = 16) -> pd.DataFrame:
    """Stage-1 answers of a base LM under `strategy` (see the module docstring)."""
    qs, chs = list(items["question"]), [list(c) for c in items["choices"]]
    if strategy == "standard":
        contexts = [""] * len(qs)
        probs = option_probabilities(lm, qs, chs)
        tokens_out = [0] * len(qs)
    elif strategy == "tot":
        beams = lm.beam_search([cloze_prompt(q) for q in qs], num_beams=3, max_new_tokens=max_new_tokens)
        branches = [[f"Thought: {b[min(k, len(b) - 1)].text.strip()}\n" for b in beams] for k in range(3)]
        votes = [option_probabilities(lm, qs, chs, ctx) for ctx in branches]
        probs = [sum(v[i] for v in votes) / 3 for i in range(len(qs))]
        contexts = branches[0]
        tokens_out = [sum(len(b.text.split()) for b in bb[:3]) for bb in beams]
    else:
        recall = lm.generate([cloze_prompt(q) for q in qs], max_new_tokens=max_new_tokens, stop=["\n"])
        texts = [g.text.strip() for g in recall]
        if strategy == "knowledge":
            contexts = [f"Knowledge: {t}\n" for t in texts]
        elif strategy == "cot":
            contexts = [f"Reasoning: {t}\n" for t in texts]
        elif strategy == "self_ask":
            contexts = [f"Follow up: {q}\nIntermediate answer: {t}\n" for q, t in zip(qs, texts)]
        else:
            raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
        probs = option_probabilities(lm, qs, chs, contexts)
        tokens_out = [g.tokens_out for g in recall]
    prompts = [cloze_prompt(q, c) for q, c in zip(qs, contexts)]
    return pd.DataFrame({
        "item_id": items["item_id"].values, "strategy": strategy, "prompt": prompts,
        "raw": [describe(p) for p in probs], "answer": [chosen_letter(p) for p in probs], "status": "parsed",
        "finish_reason": "stop",
        "tokens_in": [len(p.split()) for p in prompts], "tokens_out": tokens_out,
    })


def answer_chat(lm: LM, items: pd.DataFrame, strategy: str, max_new_tokens: int = 256) -> pd.DataFrame:
    """Stage-1 answers of an instruct model: the strategy's prompt, the letter of its explicit
    final answer (`final_answer_letter`). A reply with none is recorded as unparsed, a reply
    cut at the budget as truncated (no letter read from it); both are scored wrong, never
    dropped, and counted in the table notes."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    prompts = [fill(strategy, question=q, choices=list(c)) for q, c in zip(items["question"], items["choices"])]
    gens = lm.generate(prompts, max_new_tokens=lm.budget("lcae_stage1", max_new_tokens), chat=True)
    answers = [None if g.finish_reason == "length" else final_answer_letter(g.text, len(c))
               for g, c in zip(gens, items["choices"])]
    status = ["truncated" if g.finish_reason == "length" else "unparsed" if a is None else "parsed"
              for g, a in zip(gens, answers)]
    return pd.DataFrame({
        "item_id": items["item_id"].values, "strategy": strategy, "prompt": prompts,
        "raw": [g.text for g in gens], "answer": answers, "status": status,
        "finish_reason": [g.finish_reason for g in gens],
        "tokens_in": [g.tokens_in for g in gens], "tokens_out": [g.tokens_out for g in gens],
    })


def answer_items(lm: LM, items: pd.DataFrame, strategy: str, *, chat: bool, max_new_tokens: int) -> pd.DataFrame:
    """Stage-1 records of one examinee (model, checkpoint, strategy), judged by option letter."""
    fn = answer_chat if chat else answer_base
    out = fn(lm, items, strategy, max_new_tokens)
    ref = dict(zip(items["item_id"], items["answer"]))
    out["correct"] = [letter_match(a, ref[i]) for i, a in zip(out["item_id"], out["answer"])]
    return out
