"""Workflow jobs of the shared stages: each reads its inputs, computes, writes atomically."""
from __future__ import annotations

import pandas as pd

from selfknow.config import is_chat
from selfknow.stages.generation import CHAT_MCQ, CHAT_QA, fixed_shots, greedy_answers
from selfknow.stages.items import sample_items
from selfknow.stages.judge import cohen_kappa, judge_candidates, judge_references, kappa_interval
from selfknow.models import load_lm
from selfknow.records import read_parquet, write_parquet
from selfknow.resumable import map_chunks


def load_judge(spec: dict, cache_dir: str | None, labels: str):
    """The judge model at its last checkpoint (a model without checkpoints: its one). For
    constrained labels it is loaded without chat wrapping: `judge_candidates` renders the chat
    turn itself and scores tokens inside the assistant's reply."""
    ckpt = None if not spec.get("checkpoints") else spec["checkpoints"][-1]["name"]
    return load_lm({**spec, "chat": False} if labels == "constrained" else spec, ckpt, cache_dir=cache_dir)


def greedy_job(test: str, train: str, spec: dict, ckpt: str, out: str, *, n_shots: int,
               n_items: int, seed: int, max_new_tokens: int, cache_dir: str) -> dict:
    """Greedy answers of one (model, checkpoint) on a dataset's test items (all, or a seeded
    sample of `n_items`), with fixed few-shot examples from the train split."""
    items = read_parquet(test)
    if n_items:
        items = sample_items(items, n_items, seed)
    shots = fixed_shots(read_parquet(train), n_shots, seed)
    lm = load_lm(spec, ckpt, cache_dir=cache_dir)
    chat = is_chat(spec)
    df = map_chunks(items, lambda c: greedy_answers(lm, c, shots=shots, chat=chat, max_new_tokens=max_new_tokens),
                    out, chunk_size=256, desc="greedy",
                    params={"spec": spec, "ckpt": ckpt, "shots": shots, "mnt": max_new_tokens,
                            "prompts": [CHAT_QA, CHAT_MCQ]},
                    model=lm.identity(), finalize=lambda d: d.assign(model=spec["name"], checkpoint=ckpt))
    return {"items": len(df), "accuracy": round(float(df["correct"].mean()), 4),
            "unparsed": int(df["unparsed"].sum()), "cache_hits": lm.stats.hits, "model_calls": lm.stats.misses}


def llm_judge_job(generations: list[str], test: str, spec: dict, out: str, *, n_items: int, seed: int,
                  cache_dir: str, label_modes: list[str], multi_reference: bool) -> dict:
    """The judge audit (SPEC §0.3): the LLM judge on a seeded sample of greedy answers, each
    judged alone in the authors' request shape (`judge_candidates`), once per label mode of
    `label_modes`, beside exact match. Every judgment is kept, refused or unparsable included."""
    gens = pd.concat([read_parquet(p) for p in generations], ignore_index=True)
    items = read_parquet(test).set_index("item_id")
    sample = sample_items(gens.assign(item_id=gens["model"] + "@" + gens["checkpoint"] + ":" + gens["item_id"],
                                      source_item=gens["item_id"]), n_items, seed)
    questions = [items.loc[i, "question"] for i in sample["source_item"]]
    refs = [judge_references(items.loc[i, "answer"], list(items.loc[i, "aliases"]), multi_reference=multi_reference)
            for i in sample["source_item"]]
    # an unparsed greedy answer is shown as an empty candidate, which the judge labels N
    cands = [[a if isinstance(a, str) else ""] for a in sample["answer"]]
    parts, calls = [], {}
    for mode in label_modes:
        lm = load_judge(spec, cache_dir, mode)
        verdicts = judge_candidates(lm, questions, refs, cands, chat=is_chat(spec), labels=mode)
        calls.update({f"cache_hits_{mode}": lm.stats.hits, f"model_calls_{mode}": lm.stats.misses})
        parts.append(pd.DataFrame({
            "record": sample["item_id"].to_numpy(), "model": sample["model"].to_numpy(),
            "checkpoint": sample["checkpoint"].to_numpy(), "item_id": sample["source_item"].to_numpy(),
            "answer": sample["answer"].to_numpy(), "exact_match": sample["correct"].astype(bool).to_numpy(),
            "judge": spec["name"], "labels": mode, "judge_reply": [v.reply for v in verdicts],
            "judge_label": [v.labels[0] for v in verdicts], "judge_status": [v.status for v in verdicts],
            "judge_correct": [v.correct[0] for v in verdicts]}))
    df = pd.concat(parts, ignore_index=True)
    write_parquet(df, out)
    return {"judged": len(df), **{f"{s}_{m}": int(((df["labels"] == m) & (df["judge_status"] == s)).sum())
                                  for m in label_modes for s in ("refused", "unparsable")}, **calls}


def judge_audit_table(judged: pd.DataFrame, *, replicates: int, seed: int) -> tuple[pd.DataFrame, str]:
    """Agreement between exact match and the LLM judge, one row per label mode: rate, Cohen's
    kappa with its percentile bootstrap interval (`replicates`, `seed`), and the refused and
    unparsable judgments, which count as wrong (as in the persistent labels) and are never
    dropped. The note flags a mode whose kappa interval includes 0 (or is undefined)."""
    def num(v: float) -> str:  # rounded first, so that a bound just below 0 prints 0.000, not -0.000
        return f"{round(v, 3) + 0.0:.3f}"

    rows, flagged = [], []
    for mode, g in judged.groupby("labels", sort=False):
        em, llm = g["exact_match"].astype(bool).to_numpy(), g["judge_correct"].astype(bool).to_numpy()
        lo, hi = kappa_interval(em, llm, replicates=replicates, seed=seed)
        kappa = cohen_kappa(em, llm)
        rows.append({"judge": g["judge"].iloc[0], "labels": mode, "items": len(g),
                     "refused": int((g["judge_status"] == "refused").sum()),
                     "unparsable": int((g["judge_status"] == "unparsable").sum()),
                     "agreement": float((em == llm).mean()), "cohen_kappa": kappa,
                     "kappa_low": lo, "kappa_high": hi,
                     "em_accuracy": float(em.mean()), "judge_accuracy": float(llm.mean())})
        if not lo > 0:
            flagged.append(f"{mode} (kappa {num(kappa)}, 95 % interval [{num(lo)}, {num(hi)}]; judge marks "
                           f"{llm.mean():.0%} right, exact match {em.mean():.0%})")
    notes = ("Each greedy answer is judged alone in the authors' R/W/N request (persistent §A.5). labels: "
             "generate = the judge's own reply, parsed; constrained = one label token per candidate, the most "
             "likely of R/W/N. Refused and unparsable judgments count as wrong. Kappa interval: percentile "
             f"bootstrap over items, {replicates} replicates.")
    if flagged:
        notes += (" FLAGGED, kappa interval includes 0 (no agreement with exact match beyond chance): "
                  + "; ".join(flagged) + ".")
    return pd.DataFrame(rows), notes
