"""The LCAE protocol's workflow jobs: each reads its inputs, computes, writes atomically."""
from __future__ import annotations

import pandas as pd

from selfknow.config import is_chat
from selfknow.stages.items import sample_items
from selfknow.models import load_lm
from selfknow.models.registry import repeats_share_requests
from selfknow.protocols.lcae.examinees import STATUSES, answer_items
from selfknow.protocols.lcae.metacognition import answer_calibration, assess
from selfknow.protocols.lcae.prompting import prompts_version
from selfknow.records import read_parquet, write_parquet
from selfknow.resumable import map_chunks

from .evaluate import fit_stage1, stage3
from .records import stage1_records, stage2_records


def sample_job(test_items: str, n_items: int, seed: int, out: str) -> dict:
    """The LCAE item sample: `n_items` test items drawn with `seed` (paper: 100, seed 42)."""
    items = sample_items(read_parquet(test_items), n_items, seed)
    if items["choices"].isna().any():
        raise ValueError(f"{test_items}: LCAE needs multiple-choice items; some rows have no choices")
    write_parquet(items, out)
    return {"items": len(items)}


def stage2_repeats_shared(spec: dict, temperature: float) -> bool:
    """Whether this examinee's Stage-2 repeats are one set of requests (so identical): a base
    LM's assessment reads log-likelihoods, deterministic at any temperature; an instruct/API
    model's is generated, and shared only under greedy decoding on a deterministic backend."""
    return not is_chat(spec) or repeats_share_requests(spec, temperature)


def _per_group(work: pd.DataFrame, column: str, fn) -> pd.DataFrame:
    return pd.concat([fn(g.drop(columns=[column, "record_key"]), v) for v, g in work.groupby(column, sort=False)],
                     ignore_index=True)


def stage1_job(items_path: str, spec: dict, ckpt: str, strategies: list[str], out: str, *,
               cache_dir: str, max_new_tokens: int) -> dict:
    """Stage-1 records of one (model, checkpoint) under every strategy (one examinee each)."""
    items = read_parquet(items_path)
    lm = load_lm(spec, ckpt, cache_dir=cache_dir)
    chat = is_chat(spec)
    work = pd.concat([items.assign(strategy=s) for s in strategies], ignore_index=True)
    work["record_key"] = work["strategy"] + ":" + work["item_id"]
    df = map_chunks(
        work, lambda c: _per_group(c, "strategy", lambda g, s: answer_items(lm, g, s, chat=chat, max_new_tokens=max_new_tokens)),
        out, chunk_size=50, key="record_key", desc="stage1",
        params={"spec": spec, "ckpt": ckpt, "strategies": strategies, "mnt": max_new_tokens,
                "prompts": prompts_version()},
        model=lm.identity(), finalize=lambda d: d.assign(model=spec["name"], checkpoint=ckpt))
    return {"records": len(df), **{s: int((df["status"] == s).sum()) for s in STATUSES},
            "cache_hits": lm.stats.hits, "model_calls": lm.stats.misses}


def irt_job(stage1_paths: list[str], out_persons: str, out_items: str, *, method: str) -> dict:
    """Stage 1's joint Rasch fit over every examinee (model x checkpoint x strategy):
    `evaluate.fit_stage1` on the Stage-1 records in their documented format."""
    recs = pd.concat([stage1_records(read_parquet(p)) for p in stage1_paths], ignore_index=True)
    persons, items, converged = fit_stage1(recs, method=method)
    write_parquet(persons, out_persons)
    write_parquet(items, out_items)
    return {"examinees": len(persons), "items": len(items), "extreme_rows": int((persons["extreme"] != "").sum()),
            "extreme_cols": int((items["extreme"] != "").sum()), "converged": converged}


def stage2_job(items_path: str, stage1_path: str, irt_items_path: str, spec: dict, ckpt: str, out: str, *,
               conditions: list[str], repeats: int, cache_dir: str, reflection: str, temperature: float,
               max_new_tokens: int, base_slow_below: float, base_error_p: str, calibration_path: str,
               calibration_items: int, seed: int) -> dict:
    """Stage-2 records of one Standard-prompting examinee: every condition x repeat (a base LM
    with `base_error_p` "calibrated" first fits its calibration map on `calibration_items` items
    of `calibration_path`, drawn with `seed`)."""
    items = read_parquet(items_path)
    stage1 = read_parquet(stage1_path)
    stage1 = stage1[stage1["strategy"] == "standard"]
    item_error_p = dict(zip(*read_parquet(irt_items_path)[["item_id", "item_error_p"]].T.values))
    lm = load_lm(spec, ckpt, cache_dir=cache_dir)
    chat = is_chat(spec)
    calibration = None
    if not chat and base_error_p == "calibrated":
        calibration = answer_calibration(lm, sample_items(read_parquet(calibration_path), calibration_items, seed))
    work = pd.concat([items.assign(condition=c, repeat=r) for c in conditions for r in range(repeats)], ignore_index=True)
    work["record_key"] = work["condition"] + ":" + work["repeat"].astype(str) + ":" + work["item_id"]

    def run(chunk: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([assess(lm, g.drop(columns=["condition", "repeat", "record_key"]), stage1, c, item_error_p,
                                 chat=chat, repeat=int(r), reflection=reflection, temperature=temperature,
                                 max_new_tokens=max_new_tokens, base_slow_below=base_slow_below,
                                 base_error_p=base_error_p, calibration=calibration)
                          for (c, r), g in chunk.groupby(["condition", "repeat"], sort=False)], ignore_index=True)

    df = map_chunks(work, run, out, chunk_size=50, key="record_key", desc="stage2",
                    params={"spec": spec, "ckpt": ckpt, "conditions": conditions, "repeats": repeats,
                            "reflection": reflection, "t": temperature, "mnt": max_new_tokens,
                            **({} if chat else {"slow_below": base_slow_below, "error_p": base_error_p}),
                            **({} if calibration is None else {"calibration": calibration}),
                            "prompts": prompts_version()},
                    model=lm.identity(), finalize=lambda d: d.assign(model=spec["name"], checkpoint=ckpt))
    return {"records": len(df), "unparsed": int((~df["parsed"]).sum()), "slow": int((df["mode"] == "slow").sum()),
            "cache_hits": lm.stats.hits, "model_calls": lm.stats.misses}


def stage3_job(stage2_paths: list[str], persons_path: str, irt_items_path: str, out: str, *, eps: float) -> dict:
    """Stage 3 (`evaluate.stage3`) on the Standard-prompting examinees' Stage-2 records in
    their documented format."""
    s2 = pd.concat([stage2_records(read_parquet(p)) for p in stage2_paths], ignore_index=True)
    df = stage3(s2, read_parquet(persons_path), read_parquet(irt_items_path), eps=eps)
    write_parquet(df, out)
    return {"rows": len(df), "unparsed": int(df["n_unparsed"].sum()), "truncated": int(df["n_truncated"].sum())}
