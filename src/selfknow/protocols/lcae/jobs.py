"""The LCAE protocol's workflow jobs: each reads its inputs, computes, writes atomically."""
from __future__ import annotations

import numpy as np
import pandas as pd

from selfknow.config import is_chat
from selfknow.stages.items import sample_items
from selfknow.models import load_lm
from selfknow.models.registry import repeats_share_requests
from selfknow.protocols.lcae.examinees import STATUSES, answer_items
from selfknow.protocols.lcae.metacognition import assess
from selfknow.protocols.lcae.prompting import prompts_version
from selfknow.records import read_parquet, write_parquet
from selfknow.resumable import map_chunks
from selfknow.stats.item_fit import fit_band
from selfknow.stats.lcae import lcae
from selfknow.stats.rasch import (estimate_abilities, fit_rasch, irt_item_error_p, irt_model_error_p,
                                     response_matrix)


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


def stage1_job(items_path: str, spec: dict, checkpoint: str, strategies: list[str], out: str, *,
               cache_dir: str, max_new_tokens: int) -> dict:
    """Stage-1 records of one (model, checkpoint) under every strategy (one examinee each)."""
    items = read_parquet(items_path)
    lm = load_lm(spec, checkpoint, cache_dir=cache_dir)
    chat = is_chat(spec)
    work = pd.concat([items.assign(strategy=s) for s in strategies], ignore_index=True)
    work["record_key"] = work["strategy"] + ":" + work["item_id"]
    df = map_chunks(
        work, lambda c: _per_group(c, "strategy", lambda g, s: answer_items(lm, g, s, chat=chat, max_new_tokens=max_new_tokens)),
        out, chunk_size=50, key="record_key", desc="stage1",
        params={"spec": spec, "ckpt": checkpoint, "strategies": strategies, "mnt": max_new_tokens,
                "prompts": prompts_version()},
        model=lm.identity(), finalize=lambda d: d.assign(model=spec["name"], checkpoint=checkpoint))
    return {"records": len(df), **{s: int((df["status"] == s).sum()) for s in STATUSES},
            "cache_hits": lm.stats.hits, "model_calls": lm.stats.misses}


def examinee_id(model: str, checkpoint: str, strategy: str) -> str:
    return f"{model}@{checkpoint}/{strategy}"


def irt_job(stage1_paths: list[str], out_persons: str, out_items: str, *, method: str) -> dict:
    """Stage 1's joint Rasch fit over every examinee (model x checkpoint x strategy); writes
    abilities (with SE, fit, extreme flags, and how many replies were unparsed or truncated)
    and item difficulties with IRT_ItemErrorP."""
    recs = pd.concat([read_parquet(p) for p in stage1_paths], ignore_index=True)
    ex = [examinee_id(m, c, s) for m, c, s in zip(recs["model"], recs["checkpoint"], recs["strategy"])]
    X, ex_ids, item_ids = response_matrix(ex, recs["item_id"], recs["correct"].astype(float), common_items=False)
    fit = fit_rasch(X, method=method)
    persons = pd.DataFrame({
        "examinee": ex_ids, "model": [e.split("@")[0] for e in ex_ids],
        "checkpoint": [e.split("@")[1].split("/")[0] for e in ex_ids], "strategy": [e.split("/")[-1] for e in ex_ids],
        "theta": fit.theta, "se": fit.se_theta, "raw_score": np.nansum(X, axis=1), "n_items": np.sum(~np.isnan(X), axis=1),
        "infit": fit.infit_person, "outfit": fit.outfit_person, "extreme": fit.row_status})
    counts = pd.crosstab(pd.Series(ex, name="examinee"), recs["status"]).reindex(columns=STATUSES, fill_value=0)
    for s in ("unparsed", "truncated"):
        persons[f"n_{s}"] = counts[s].reindex(ex_ids).to_numpy()
    items = pd.DataFrame({
        "item_id": item_ids, "b": fit.b, "se": fit.se_b, "infit": fit.infit_item, "outfit": fit.outfit_item,
        "band": fit_band(fit.infit_item, fit.outfit_item), "extreme": fit.col_status,
        "item_error_p": irt_item_error_p(fit.theta, fit.b), "p_correct": np.nanmean(X, axis=0)})
    write_parquet(persons, out_persons)
    write_parquet(items, out_items)
    return {"examinees": len(ex_ids), "items": len(item_ids), "extreme_rows": len(fit.extreme_rows),
            "extreme_cols": len(fit.extreme_cols), "converged": fit.converged}


def stage2_job(items_path: str, stage1_path: str, irt_items_path: str, spec: dict, checkpoint: str, out: str, *,
               conditions: list[str], repeats: int, cache_dir: str, reflection: str, temperature: float,
               max_new_tokens: int) -> dict:
    """Stage-2 records of one Standard-prompting examinee: every condition x repeat."""
    items = read_parquet(items_path)
    stage1 = read_parquet(stage1_path)
    stage1 = stage1[stage1["strategy"] == "standard"]
    item_error_p = dict(zip(*read_parquet(irt_items_path)[["item_id", "item_error_p"]].T.values))
    lm = load_lm(spec, checkpoint, cache_dir=cache_dir)
    chat = is_chat(spec)
    work = pd.concat([items.assign(condition=c, repeat=r) for c in conditions for r in range(repeats)], ignore_index=True)
    work["record_key"] = work["condition"] + ":" + work["repeat"].astype(str) + ":" + work["item_id"]

    def run(chunk: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([assess(lm, g.drop(columns=["condition", "repeat", "record_key"]), stage1, c, item_error_p,
                                 chat=chat, repeat=int(r), reflection=reflection, temperature=temperature,
                                 max_new_tokens=max_new_tokens)
                          for (c, r), g in chunk.groupby(["condition", "repeat"], sort=False)], ignore_index=True)

    df = map_chunks(work, run, out, chunk_size=50, key="record_key", desc="stage2",
                    params={"spec": spec, "ckpt": checkpoint, "conditions": conditions, "repeats": repeats,
                            "reflection": reflection, "t": temperature, "mnt": max_new_tokens,
                            "prompts": prompts_version()},
                    model=lm.identity(), finalize=lambda d: d.assign(model=spec["name"], checkpoint=checkpoint))
    return {"records": len(df), "unparsed": int((~df["parsed"]).sum()), "slow": int((df["mode"] == "slow").sum()),
            "cache_hits": lm.stats.hits, "model_calls": lm.stats.misses}


def stage3_job(stage2_paths: list[str], persons_path: str, irt_items_path: str, out: str, *, eps: float) -> dict:
    """Stage 3: abilities re-estimated from the final answers with Stage-1 difficulties fixed,
    and LCAE (BCE; squared error as the named variant) of LLM_ModelErrorP against
    IRT_ModelErrorP of the examinee's Stage-1 ability, per (examinee, condition, repeat).
    The abilities use the items Stage 1's used, the calibrated (non-extreme) ones, so that
    identical answers give identical abilities; LCAE and accuracy use every item (an extreme
    item has its adjusted difficulty). Unparsed or truncated error probabilities are left out
    of that examinee's mean and counted."""
    items = read_parquet(irt_items_path)
    b = items.set_index("item_id")["b"]
    calibrated = set(items.loc[items["extreme"] == "", "item_id"])
    persons = read_parquet(persons_path).set_index("examinee")
    rows = []
    for path in stage2_paths:
        s2 = read_parquet(path)
        model, ckpt = s2["model"].iloc[0], s2["checkpoint"].iloc[0]
        theta1 = persons.loc[examinee_id(model, ckpt, "standard"), "theta"]
        for (cond, rep), g in s2.groupby(["condition", "repeat"], sort=True):
            g = g.set_index("item_id").loc[b.index.intersection(g["item_id"])]
            bq = b.loc[g.index].to_numpy()
            x = g["correct_final"].astype(float).to_numpy()
            cal = g.index.isin(list(calibrated))
            theta, se = estimate_abilities(x[None, cal], bq[cal])
            e = irt_model_error_p(np.array([theta1]), bq)[0]
            ok = g["parsed"].to_numpy() & np.isfinite(g["error_p"].to_numpy(dtype=float))
            c = g["error_p"].to_numpy(dtype=float)
            cut = (g["finish_reason"] == "length").to_numpy()
            rows.append(dict(
                model=model, checkpoint=ckpt, examinee=examinee_id(model, ckpt, "standard"), condition=cond,
                repeat=int(rep), theta_stage1=theta1, theta=float(theta[0]), se=float(se[0]),
                accuracy=float(x.mean()), lcae=float(lcae(e[ok], c[ok], eps=eps, kind="bce")),
                lcae_squared=float(lcae(e[ok], c[ok], eps=eps, kind="squared")), n_items=int(len(g)),
                n_ability_items=int(cal.sum()), n_unparsed=int((~ok & ~cut).sum()), n_truncated=int(cut.sum()),
                slow_share=float((g["mode"] == "slow").mean()),
                tokens_in=int(g["tokens_in"].sum()), tokens_out=int(g["tokens_out"].sum())))
    df = pd.DataFrame(rows)
    write_parquet(df, out)
    return {"rows": len(df), "unparsed": int(df["n_unparsed"].sum()), "truncated": int(df["n_truncated"].sum())}
