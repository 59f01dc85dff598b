"""Item sampling (SPEC §0.1): every dataset normalised to one item schema, split, then sampled.

The papers' datasets are read by `selfknow.stages.datasets` (hub or local copy), which also puts
each item in the paper's own split; the mini world's items come from the world generator and
are split here with the config's seed. Items with split "icl" are the reserved in-context
examples: they travel in the train file, in prompt order, and are never sampled as questions.
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from selfknow.stages.datasets import bioasq, jeopardy, medxpertqa, mmlu, triviaqa
from selfknow.stages.datasets.source import ItemError
from selfknow.records import ITEM_COLUMNS

__all__ = ["ItemError", "LETTERS", "build_items", "deduplicate", "load_source", "reserved_icl_examples",
           "sample_items", "split_items", "validate_items"]

LETTERS = string.ascii_uppercase

#: loader name -> the module of `selfknow.stages.datasets` that reads that source
_PAPER_LOADERS = {"triviaqa": triviaqa, "jeopardy": jeopardy, "bioasq": bioasq, "mmlu": mmlu,
                  "medxpertqa": medxpertqa}


def load_source(name: str, spec: dict, world_dir: str | Path | None = None) -> pd.DataFrame:
    """All items of one configured dataset in the item schema (a paper's dataset with the split
    its loader gives each item), validated: no missing answers, unique ids, well-formed choices."""
    loader = spec["loader"]
    if loader.startswith("world_"):
        if world_dir is None:
            raise ItemError(f"{name}: the {loader} loader needs the generated world directory")
        df = pd.read_parquet(Path(world_dir) / ("mcq.parquet" if loader == "world_mcq" else "qa.parquet"))
        if loader != "world_mcq":
            # One domain is held out of world_qa and forms world_qa_heldout (BioASQ's role in
            # the persistent paper's domain transfer, Table 18): the last domain by name unless set.
            held_name = spec.get("heldout_domain") or sorted(df["domain"].unique())[-1]
            if held_name not in set(df["domain"]):
                raise ItemError(f"{name}: heldout_domain {held_name!r} is not a domain of the world")
            held = df["domain"] == held_name
            df = df[held] if loader == "world_qa_heldout" else df[~held]
            if spec.get("domain_shard") is not None:
                df = df[df["domain"].isin(_domain_shard(name, spec["domain_shard"], df["domain"]))]
        df = df.assign(dataset=name)
        source = str(Path(world_dir))
    else:
        df = _PAPER_LOADERS[loader].load(name, spec)
        source = spec["path"] if "path" in spec else spec["hub_id"]
    return validate_items(df, source)


def build_items(name: str, spec: dict, seed: int, world_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """The train and test items of one configured dataset. A paper's dataset keeps the splits
    its loader gives (the in-context examples first in the train frame); the world's items are
    deduplicated and split with `seed`."""
    items = load_source(name, spec, world_dir)
    if spec["loader"].startswith("world_"):
        return split_items(deduplicate(items), seed)
    return {"train": pd.concat([items[items["split"] == "icl"], items[items["split"] == "train"]],
                               ignore_index=True),
            "test": items[items["split"] == "test"].reset_index(drop=True)}


def _domain_shard(name: str, shard, domains: pd.Series) -> list[str]:
    """Domains of shard [k, n]: every n-th domain by name from the k-th (0-based), so the n
    shards of one world split its domains into n disjoint datasets (the persistent paper's
    second training dataset, Jeopardy's role, in the offline default)."""
    if (not isinstance(shard, (list, tuple)) or len(shard) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in shard)
            or not 0 <= shard[0] < shard[1]):
        raise ItemError(f"{name}: domain_shard must be [k, n] with integers 0 <= k < n, got {shard!r}")
    k, n = shard
    names = sorted(domains.unique())
    if len(names) < n:
        raise ItemError(f"{name}: domain_shard {shard!r} needs at least {n} domains, the world has {len(names)}")
    return names[k::n]


def validate_items(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check the item schema row by row; raise ItemError naming the source and row."""
    missing = [c for c in ITEM_COLUMNS if c not in df.columns]
    if missing:
        raise ItemError(f"{source}: missing columns {missing}")
    for i, r in enumerate(df.itertuples(index=False)):
        if r.answer is None or (isinstance(r.answer, float) and np.isnan(r.answer)) or str(r.answer).strip() == "":
            raise ItemError(f"{source}: row {i} (item {r.item_id}): missing answer")
        if r.choices is not None and not (isinstance(r.choices, float)):
            ch = list(r.choices)
            if len(ch) < 2 or len(set(map(str, ch))) != len(ch):
                raise ItemError(f"{source}: row {i} (item {r.item_id}): choices must be >= 2 distinct options, got {ch}")
            if str(r.answer) not in LETTERS[: len(ch)]:
                raise ItemError(f"{source}: row {i} (item {r.item_id}): answer {r.answer!r} is not an option letter")
    dup = df["item_id"][df["item_id"].duplicated()]
    if len(dup):
        first = dup.index[0]
        raise ItemError(f"{source}: row {first}: duplicate item_id {dup.iloc[0]!r}")
    return df.reset_index(drop=True)


def deduplicate(df: pd.DataFrame) -> pd.DataFrame:
    """Drop repeated questions (same normalised text and choices), keeping the first."""
    key = df["question"].str.lower().str.split().str.join(" ")
    return df[~key.duplicated()].reset_index(drop=True)


def sample_items(df: pd.DataFrame, n: int | None, seed: int, blacklist: Iterable[str] = (),
                 stratify: str | None = None) -> pd.DataFrame:
    """`n` items drawn without replacement with `seed` (all when n is None or larger), after
    dropping blacklisted ids and the reserved in-context examples (split "icl"); with
    `stratify`, n items per value of that column."""
    df = df[~df["item_id"].isin(set(blacklist))]
    if "split" in df.columns:
        df = df[df["split"] != "icl"]
    rng = np.random.default_rng(seed)
    if stratify:
        parts = [g.iloc[np.sort(rng.permutation(len(g))[: n or len(g)])] for _, g in df.groupby(stratify, sort=True)]
        return pd.concat(parts).reset_index(drop=True)
    if n is None or n >= len(df):
        return df.reset_index(drop=True)
    return df.iloc[np.sort(rng.permutation(len(df))[:n])].reset_index(drop=True)


def reserved_icl_examples(train: pd.DataFrame, n: int) -> list[tuple[str, str]] | None:
    """The first `n` reserved in-context examples (split "icl", in the paper's prompt order)
    as stripped (question, answer) pairs; None when the train items reserve none (the world)."""
    if "split" not in train.columns or not (train["split"] == "icl").any():
        return None
    reserved = train[train["split"] == "icl"]
    if len(reserved) < n:
        raise ItemError(f"the train items reserve {len(reserved)} in-context examples; {n} are asked for")
    return [(str(q).strip(), str(a).strip()) for q, a in zip(reserved["question"][:n], reserved["answer"][:n])]


def split_items(df: pd.DataFrame, seed: int, test_fraction: float = 0.5) -> dict[str, pd.DataFrame]:
    """Train/test items: a source's own split column when it has both, else a seeded split."""
    if set(df["split"]) >= {"train", "test"}:
        return {s: df[df["split"] == s].reset_index(drop=True) for s in ("train", "test")}
    perm = np.random.default_rng(seed).permutation(len(df))
    n_test = int(round(len(df) * test_fraction))
    is_test = np.zeros(len(df), bool)
    is_test[perm[:n_test]] = True
    return {"train": df[~is_test].assign(split="train").reset_index(drop=True),
            "test": df[is_test].assign(split="test").reset_index(drop=True)}
