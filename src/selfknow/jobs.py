"""Workflow jobs of the shared stages: each reads its inputs, computes, writes atomically."""
from __future__ import annotations

import pandas as pd

from selfknow.generation import fixed_shots, greedy_answers
from selfknow.items import sample_items
from selfknow.judge import cohen_kappa, judge_prompt, parse_grade
from selfknow.models import load_lm
from selfknow.records import read_parquet, write_parquet
from selfknow.resumable import map_chunks


def is_chat(spec: dict) -> bool:
    return bool(spec.get("chat", False)) or spec["backend"] == "openai"


def greedy_job(test_path: str, train_path: str, spec: dict, checkpoint: str, out: str, *, n_shots: int,
               n_items: int, seed: int, max_new_tokens: int, cache_dir: str) -> dict:
    """Greedy answers of one (model, checkpoint) on a dataset's test items (all, or a seeded
    sample of `n_items`), with fixed few-shot examples from the train split."""
    items = read_parquet(test_path)
    if n_items:
        items = sample_items(items, n_items, seed)
    shots = fixed_shots(read_parquet(train_path), n_shots, seed)
    lm = load_lm(spec, checkpoint, cache_dir=cache_dir)
    chat = is_chat(spec)
    df = map_chunks(items, lambda c: greedy_answers(lm, c, shots=shots, chat=chat, max_new_tokens=max_new_tokens),
                    out, chunk_size=256, desc="greedy",
                    params={"spec": spec, "ckpt": checkpoint, "shots": shots, "mnt": max_new_tokens},
                    finalize=lambda d: d.assign(model=spec["name"], checkpoint=checkpoint))
    return {"items": len(df), "accuracy": round(float(df["correct"].mean()), 4),
            "unparsed": int(df["unparsed"].sum()), "cache_hits": lm.stats.hits, "model_calls": lm.stats.misses}


def llm_judge_job(generation_paths: list[str], test_path: str, spec: dict, out: str, *, n_items: int, seed: int,
                  cache_dir: str) -> dict:
    """The LLM judge on a seeded sample of generated answers, beside exact match (the audit)."""
    gens = pd.concat([read_parquet(p) for p in generation_paths], ignore_index=True)
    items = read_parquet(test_path).set_index("item_id")
    sample = sample_items(gens.assign(item_id=gens["model"] + "@" + gens["checkpoint"] + ":" + gens["item_id"],
                                      source_item=gens["item_id"]), n_items, seed)
    prompts = [judge_prompt(items.loc[i, "question"], list(items.loc[i, "aliases"]), a)
               for i, a in zip(sample["source_item"], sample["answer"])]
    lm = load_lm(spec, None if not spec.get("checkpoints") else spec["checkpoints"][-1]["name"], cache_dir=cache_dir)
    replies = lm.generate(prompts, max_new_tokens=8, chat=is_chat(spec))
    grades = [parse_grade(r.text) for r in replies]
    df = pd.DataFrame({"record": sample["item_id"], "model": sample["model"], "checkpoint": sample["checkpoint"],
                       "item_id": sample["source_item"], "answer": sample["answer"], "exact_match": sample["correct"],
                       "judge_reply": [r.text for r in replies], "judge_grade": grades,
                       "judge_unparsed": [g is None for g in grades]})
    write_parquet(df, out)
    return {"judged": len(df), "unparsed": int(df["judge_unparsed"].sum())}


def judge_audit_table(judged: pd.DataFrame) -> pd.DataFrame:
    """Agreement between exact match and the LLM judge (rate, Cohen's kappa), unparsed grades
    counted apart (SPEC §0.3)."""
    ok = judged[~judged["judge_unparsed"]]
    em, llm = ok["exact_match"].astype(bool), ok["judge_grade"].astype(bool)
    return pd.DataFrame([{
        "judges": "exact match vs LLM judge", "items": len(judged), "graded": len(ok),
        "unparsed": int(judged["judge_unparsed"].sum()),
        "agreement": float((em == llm).mean()) if len(ok) else float("nan"),
        "cohen_kappa": cohen_kappa(em, llm) if len(ok) else float("nan"),
        "em_accuracy": float(em.mean()) if len(ok) else float("nan"),
        "judge_accuracy": float(llm.mean()) if len(ok) else float("nan")}])
