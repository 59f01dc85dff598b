"""A quick evaluator of world checkpoints: greedy few-shot exact match, MCQ letter accuracy.

Used by the world's tests and tuning and by the workflow's world report table; the paper
protocols go through ``selfknow.models`` instead. Loads checkpoints with ``transformers``
directly, batches prompts with left padding.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.stages.judge import normalise_answer
from selfknow.world.generator import LETTERS, mcq_prompt, qa_prompt


def default_shots(qa: pd.DataFrame, n_shots: int = 5, seed: int = 0) -> list[tuple[str, str]]:
    """``n_shots`` fixed (question, answer) examples from the train split (seeded)."""
    pool = qa[qa["split"] == "train"] if (qa["split"] == "train").any() else qa
    pool = pool.sort_values("item_id")
    idx = np.random.default_rng(seed).choice(len(pool), size=min(n_shots, len(pool)), replace=False)
    return [(q, a) for q, a in zip(pool["question"].iloc[idx], pool["answer"].iloc[idx])]


def _load(ckpt: str | os.PathLike):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    tok.padding_side = "left"
    # Prompts longer than the context keep their end (the question being asked).
    tok.truncation_side = "left"
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    model.eval()
    return tok, model


def greedy_answers(ckpt: str | os.PathLike, prompts: Sequence[str], *, max_new_tokens: int = 12,
                   batch_size: int = 64) -> list[str]:
    """Greedy continuation of each prompt, cut at the first newline and stripped. Prompts are
    left-truncated to fit the context with ``max_new_tokens`` to spare."""
    import torch

    tok, model = _load(ckpt)
    out: list[str] = []
    with torch.inference_mode():
        for i in range(0, len(prompts), batch_size):
            enc = tok(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True,
                      truncation=True, max_length=model.config.n_positions - max_new_tokens)
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out.extend(t.split("\n", 1)[0].strip() for t in texts)
    return out


def evaluate_checkpoints(ckpt_dirs: Sequence[str | os.PathLike], qa: pd.DataFrame, n_shots: int = 5,
                         shots: Sequence[tuple[str, str]] | None = None, batch_size: int = 64) -> pd.DataFrame:
    """Greedy exact-match correctness of every (checkpoint, QA item).

    Prompt: ``qa_prompt(question, shots)`` with ``shots`` (default: ``default_shots(qa,
    n_shots)``); an answer is correct when its normalised text equals a normalised alias.
    Returns columns checkpoint (directory name), checkpoint_dir, item_id, domain, split,
    prediction, correct.
    """
    shots = list(shots) if shots is not None else default_shots(qa, n_shots)
    prompts = [qa_prompt(q, shots) for q in qa["question"]]
    alias_sets = [{normalise_answer(a) for a in al} for al in qa["aliases"]]
    frames = []
    for ck in ckpt_dirs:
        preds = greedy_answers(ck, prompts, batch_size=batch_size)
        frames.append(pd.DataFrame({
            "checkpoint": os.path.basename(os.path.normpath(ck)), "checkpoint_dir": str(ck),
            "item_id": qa["item_id"].to_numpy(), "domain": qa["domain"].to_numpy(),
            "split": qa["split"].to_numpy(), "prediction": preds,
            "correct": [normalise_answer(p) in s for p, s in zip(preds, alias_sets)]}))
    return pd.concat(frames, ignore_index=True)


def evaluate_mcq(ckpt_dirs: Sequence[str | os.PathLike], mcq: pd.DataFrame,
                 batch_size: int = 64) -> pd.DataFrame:
    """Next-token letter choice on ``mcq_prompt``: argmax over the tokens " A".." D".
    Returns columns checkpoint, item_id, domain, split, choice, p_choice (renormalised over the
    four letters), correct."""
    import torch

    frames = []
    prompts = [mcq_prompt(q, list(c)) for q, c in zip(mcq["question"], mcq["choices"])]
    for ck in ckpt_dirs:
        tok, model = _load(ck)
        letter_ids = [tok(f" {L}", add_special_tokens=False)["input_ids"] for L in LETTERS]
        if any(len(t) != 1 for t in letter_ids):
            raise ValueError(f"{ck}: option letters are not single tokens: {letter_ids}")
        ids = [t[0] for t in letter_ids]
        probs = []
        with torch.inference_mode():
            for i in range(0, len(prompts), batch_size):
                enc = tok(prompts[i:i + batch_size], return_tensors="pt", padding=True,
                          truncation=True, max_length=model.config.n_positions)
                logits = model(**enc).logits[:, -1, ids]
                probs.append(torch.softmax(logits, -1).numpy())
        p = np.concatenate(probs)
        choice = np.array(LETTERS)[p.argmax(1)]
        frames.append(pd.DataFrame({
            "checkpoint": os.path.basename(os.path.normpath(ck)), "item_id": mcq["item_id"].to_numpy(),
            "domain": mcq["domain"].to_numpy(), "split": mcq["split"].to_numpy(), "choice": choice,
            "p_choice": p.max(1), "correct": choice == mcq["answer"].to_numpy()}))
    return pd.concat(frames, ignore_index=True)


def contrast_summary(results: pd.DataFrame, checkpoints: Sequence[str]) -> pd.DataFrame:
    """For consecutive checkpoint pairs (k, k'): contrast-set size (items exactly one answers
    correctly, SPEC §1), improvements (k' right) and regressions (k right)."""
    wide = results.pivot(index="item_id", columns="checkpoint", values="correct")
    rows = []
    for a, b in zip(checkpoints[:-1], checkpoints[1:]):
        imp = int((~wide[a] & wide[b]).sum())
        reg = int((wide[a] & ~wide[b]).sum())
        rows.append({"earlier": a, "later": b, "contrast": imp + reg, "improvements": imp,
                     "regressions": reg})
    return pd.DataFrame(rows)
