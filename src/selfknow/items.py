"""Item sampling (SPEC §0.1): every dataset normalised to one item schema, then sampled.

Loaders for the papers' datasets read Hugging Face `datasets` ids (imported lazily: only
paper-scale runs need them) or local files; the mini world's items come from the world
generator. Each row normaliser is a pure function, so the formats are tested without the hub.
"""
from __future__ import annotations

import logging
import re
import string
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from selfknow.records import ITEM_COLUMNS, read_json_file

LETTERS = string.ascii_uppercase
log = logging.getLogger(__name__)


class ItemError(ValueError):
    """A malformed dataset row; the message names the file (or dataset) and the row."""


def _item(item_id, dataset, domain, question, choices, answer, aliases, split) -> dict:
    return dict(item_id=str(item_id), dataset=dataset, domain=domain, question=question,
                choices=None if choices is None else list(choices), answer=answer,
                aliases=list(aliases), split=split)


# ---- row normalisers (one per source format) -------------------------------------------------

def triviaqa_row(row: dict, dataset: str, split: str) -> dict:
    """mandarjoshi/trivia_qa rc.nocontext: answer.value plus answer.aliases."""
    ans = row["answer"]
    aliases = list(dict.fromkeys([ans["value"], *ans.get("aliases", [])]))
    return _item(row["question_id"], dataset, "trivia", row["question"], None, ans["value"], aliases, split)


_HTML_LINK = re.compile(r"<a\s[^>]*>.*?</a>", re.IGNORECASE | re.DOTALL)
_HTML_TAG = re.compile(r"<[^>]+>")


def jeopardy_row(row: dict, dataset: str, split: str, index: int) -> dict | None:
    """soldni/jeopardy: the category prefixes the clue (persistent §3.1); clues with HTML links
    (usually pointing at media the model cannot see) are dropped (returns None)."""
    q = row["question"]
    if _HTML_LINK.search(q):
        return None
    q = _HTML_TAG.sub("", q).strip().strip("'\"")
    cat = str(row["category"]).strip()
    return _item(row.get("id", index), dataset, cat.lower(), f"{cat}: {q}", None, row["answer"], [row["answer"]], split)


def bioasq_row(row: dict, dataset: str, split: str) -> dict | None:
    """BioASQ training JSON: factoid and list questions only; every exact answer (and synonym)
    is accepted; the prompt asks for one answer (persistent §3.1)."""
    if row.get("type") not in ("factoid", "list"):
        return None
    exact = row["exact_answer"]
    # factoid: [[syn, syn], ...] or [syn, ...]; list: [[syn, ...], [syn, ...]]
    flat = [a for group in exact for a in (group if isinstance(group, list) else [group])]
    if not flat:
        raise ItemError(f"{dataset}: question {row.get('id')}: empty exact_answer")
    question = row["body"].strip() + " Just output one of the answers."
    return _item(row["id"], dataset, row["type"], question, None, flat[0], list(dict.fromkeys(flat)), split)


def mmlu_row(row: dict, dataset: str, split: str, index: int) -> dict:
    """cais/mmlu: four choices, answer as an index."""
    choices = list(row["choices"])
    if len(choices) != 4:
        raise ItemError(f"{dataset}: row {index}: expected 4 choices, got {len(choices)}")
    letter = LETTERS[int(row["answer"])]
    return _item(f"{row['subject']}-{index}", dataset, row["subject"], row["question"], choices, letter, [letter], split)


def medxpertqa_row(row: dict, dataset: str, split: str) -> dict:
    """TsinghuaC3I/MedXpertQA Text: options as a letter->text mapping, label a letter."""
    opts = row["options"]
    letters = sorted(opts)
    return _item(row["id"], dataset, row.get("medical_task", "medicine"), row["question"],
                 [opts[k] for k in letters], row["label"], [row["label"]], split)


# ---- loaders -----------------------------------------------------------------------------------

def _hf_rows(hub_id: str, name: str | None, split: str, revision: str | None) -> Iterable[dict]:
    import datasets  # lazy: only paper-scale configs load hub datasets

    return datasets.load_dataset(hub_id, name, split=split, revision=revision)


def load_source(name: str, spec: dict, world_dir: str | Path | None = None) -> pd.DataFrame:
    """All items of one configured dataset in the item schema (both splits where the source
    has them), validated: no missing answers, unique ids, well-formed choices."""
    loader = spec["loader"]
    rows: list[dict] = []
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
    elif loader == "bioasq":
        path = Path(spec["path"])
        if not path.exists():
            raise ItemError(f"{name}: BioASQ file {path} does not exist")
        rows = _read_bioasq(path, name)
        df, source = pd.DataFrame(rows), str(path)
    else:
        hub = spec.get("hub_id") or {"triviaqa": "mandarjoshi/trivia_qa", "jeopardy": "soldni/jeopardy",
                                     "mmlu": "cais/mmlu", "medxpertqa": "TsinghuaC3I/MedXpertQA"}[loader]
        split = spec.get("split", {"triviaqa": "validation", "jeopardy": "train", "mmlu": "test",
                                   "medxpertqa": "test"}[loader])
        config_name = {"triviaqa": "rc.nocontext", "mmlu": "all", "medxpertqa": "Text"}.get(loader)
        it = _hf_rows(hub, config_name, split, spec.get("revision"))
        n_linked = 0
        for i, r in enumerate(it):
            if loader == "triviaqa":
                rows.append(triviaqa_row(r, name, "test"))
            elif loader == "jeopardy":
                if (item := jeopardy_row(r, name, "test", i)) is not None:
                    rows.append(item)
                else:
                    n_linked += 1
            elif loader == "mmlu":
                if spec.get("subjects") and r["subject"] not in spec["subjects"]:
                    continue
                rows.append(mmlu_row(r, name, "test", i))
            else:
                rows.append(medxpertqa_row(r, name, "test"))
        if n_linked:
            # persistent §3.1 drops clues that link to media the model cannot see
            log.warning("%s: %s: skipped %d clues with HTML links", name, hub, n_linked)
        df, source = pd.DataFrame(rows), hub
    return validate_items(df, source)


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


def _read_bioasq(path: Path, name: str) -> list[dict]:
    """The items of one BioASQ training JSON; any malformation raises an ItemError naming the
    file and the question (index and id)."""
    try:
        data = read_json_file(path)
    except ValueError as err:
        raise ItemError(f"{name}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ItemError(f"{name}: {path}: expected an object with a 'questions' list")
    rows, skipped = [], 0
    for i, q in enumerate(data["questions"]):
        where = f"{name}: {path}: questions[{i}]" + (f" (id {q.get('id')!r})" if isinstance(q, dict) else "")
        if not isinstance(q, dict):
            raise ItemError(f"{where}: expected an object, got {type(q).__name__}")
        if q.get("type") not in ("factoid", "list"):
            skipped += 1
            continue
        missing = [k for k in ("id", "body", "exact_answer") if k not in q]
        if missing:
            raise ItemError(f"{where}: missing key(s) {missing}")
        if not isinstance(q["exact_answer"], list) or not isinstance(q["body"], str):
            raise ItemError(f"{where}: 'exact_answer' must be a list and 'body' a string")
        try:
            rows.append(bioasq_row(q, name, "test"))
        except ItemError as err:
            raise ItemError(f"{where}: {err}") from None
    if skipped:
        # persistent §3.1 keeps factoid and list questions only
        log.warning("%s: %s: skipped %d of %d questions that are not factoid/list", name, path, skipped,
                    len(data["questions"]))
    return rows


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
    dropping blacklisted ids; with `stratify`, n items per value of that column."""
    df = df[~df["item_id"].isin(set(blacklist))]
    rng = np.random.default_rng(seed)
    if stratify:
        parts = [g.iloc[np.sort(rng.permutation(len(g))[: n or len(g)])] for _, g in df.groupby(stratify, sort=True)]
        return pd.concat(parts).reset_index(drop=True)
    if n is None or n >= len(df):
        return df.reset_index(drop=True)
    return df.iloc[np.sort(rng.permutation(len(df))[:n])].reset_index(drop=True)


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
