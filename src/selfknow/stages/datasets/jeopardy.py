"""Jeopardy (soldni/jeopardy, config `all_questions`) as the persistent paper processes it
(§3.1, §A.4 and Table 5; the authors' `conset/dataset_configs/jeopardy.py`).

Order of steps: shuffle the train split (`shuffle_seed`, 17), drop clues with an HTML link
("<a "), keep the first of each stripped clue, keep the categories (`ee-category`) with at
least `min_category_count` (150) clues that are not in `exclude_categories`, prefix each clue
with "[CATEGORY] ". The first `n_icl` (5) questions are the in-context examples, the first
`reserved_icl` (10) are kept out of training and evaluation, and `train_range` /
`test_range` index the rest. Malformed clues (the authors' blacklist rule) are dropped from
both splits (§A.4: train 4997, test 4998).
"""
from __future__ import annotations

import logging
import re
from collections import Counter

import pandas as pd

from .source import frame, ItemError, dedup_stripped, hf_shuffle_order, make_item, read_rows, require_fields, take_range

log = logging.getLogger(__name__)

#: persistent Table 5: the 85 categories the authors keep (their `INCLUDE_CATEGORIES`)
PAPER_CATEGORIES = frozenset([
    "LITERATURE", "SCIENCE", "AMERICAN HISTORY", "POTPOURRI", "WORLD HISTORY", "WORD ORIGINS", "HISTORY",
    "COLLEGES & UNIVERSITIES", "SPORTS", "U.S. CITIES", "WORLD GEOGRAPHY", "BODIES OF WATER", "STATE CAPITALS",
    "BUSINESS & INDUSTRY", "ANIMALS", "WORLD CAPITALS", "U.S. GEOGRAPHY", "RELIGION", "SHAKESPEARE", "OPERA",
    "ISLANDS", "BALLET", "FICTIONAL CHARACTERS", "TELEVISION", "PEOPLE", "LANGUAGES", "TRANSPORTATION",
    "THE BIBLE", "ART & ARTISTS", "BOOKS & AUTHORS", "U.S. HISTORY", "FOOD", "GEOGRAPHY", "ART",
    "HOLIDAYS & OBSERVANCES", "MUSEUMS", "SCIENCE & NATURE", "AMERICAN LITERATURE", "3-LETTER WORDS",
    "AMERICANA", "POETS & POETRY", "ANNUAL EVENTS", "POP MUSIC", "AUTHORS", "CLASSICAL MUSIC", "QUOTATIONS",
    "HODGEPODGE", "MYTHOLOGY", "NONFICTION", "WORLD CITIES", "THE MOVIES", "THE CIVIL WAR", "U.S. PRESIDENTS",
    "MUSICAL INSTRUMENTS", "FOOD & DRINK", "AROUND THE WORLD", "MUSIC", "4-LETTER WORDS", "HISTORIC NAMES",
    "COMPOSERS", "ASTRONOMY", "BIOLOGY", "POTENT POTABLES", "MOUNTAINS", "EXPLORERS", "EUROPEAN HISTORY",
    "MEDICINE", "SCIENTISTS", "ORGANIZATIONS", "TRAVEL & TOURISM", "WEIGHTS & MEASURES", "FIRST LADIES",
    "FRUITS & VEGETABLES", "ARCHITECTURE", "MAGAZINES", "THE BODY HUMAN", "IN THE DICTIONARY", "AWARDS",
    "ZOOLOGY", "FAMOUS AMERICANS", "VOCABULARY", "FASHION", "THEATRE", "19th CENTURY AMERICA", "NATURE",
])

_CLUE_THEN_MISSING = re.compile(r"\bclue\b.*\bmissing\b", re.IGNORECASE | re.DOTALL)
_CATEGORY_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def is_malformed_clue(question: str) -> bool:
    """The authors' blacklist rule for a "[CATEGORY] clue" question: the clue says a clue is
    missing, or is not wrapped in single quotes as well-formed clues of this dataset are."""
    clue = _CATEGORY_PREFIX.sub("", question).strip()
    quoted = len(clue) >= 2 and clue[0] == "'" and clue[-1] == "'"
    return bool(_CLUE_THEN_MISSING.search(clue)) or not quoted


def process(rows: list[dict], name: str, spec: dict, where: str) -> pd.DataFrame:
    """Items of the rows of the hub's train split, see the module docstring."""
    require_fields(rows, {"question": str, "ee-category": str, "continuation": str}, where)
    order = hf_shuffle_order(len(rows), spec["shuffle_seed"])
    shuffled = [rows[i] for i in order]
    linked = [r for r in shuffled if "<a " in r["question"].strip().lower()]
    kept = [r for r in shuffled if "<a " not in r["question"].strip().lower()]
    kept = [kept[i] for i in dedup_stripped(r["question"] for r in kept)]
    triples = [(r["ee-category"].strip(), r["question"].strip(), r["continuation"].strip()) for r in kept]
    counts = Counter(c for c, _, _ in triples)
    excluded = set(spec["exclude_categories"])
    valid = {c for c, n in counts.items() if n >= spec["min_category_count"] and c not in excluded}
    if spec["check_paper_categories"] and valid != PAPER_CATEGORIES:
        raise ItemError(f"{where}: the kept categories differ from the paper's 85 (Table 5): "
                        f"extra {sorted(valid - PAPER_CATEGORIES)}, missing {sorted(PAPER_CATEGORIES - valid)}")
    questions = [(c, f"[{c}] {q}", a) for c, q, a in triples if c in valid]
    log.info("%s: %s: %d rows, %d with HTML links, %d after dedup, %d in %d categories", name, where,
             len(rows), len(linked), len(triples), len(questions), len(valid))

    if spec["n_icl"] > spec["reserved_icl"]:
        raise ItemError(f"{name}: n_icl {spec['n_icl']} exceeds reserved_icl {spec['reserved_icl']}")
    icl = questions[: spec["n_icl"]]
    bad_icl = [q for _, q, _ in icl if is_malformed_clue(q)]
    if spec["blacklist"] and bad_icl:
        raise ItemError(f"{where}: malformed clue(s) among the in-context examples: {bad_icl}")
    evaluation = questions[spec["reserved_icl"]:]
    items = [make_item(f"{name}-icl{k}", name, c, q, None, a, [a], "icl") for k, (c, q, a) in enumerate(icl)]
    for split in ("train", "test"):
        start = spec[f"{split}_range"][0]
        part = take_range(evaluation, spec[f"{split}_range"], f"{where}: {split}_range")
        # ids are the authors' canonical indices into the evaluation list
        rows_split = [(start + k, c, q, a) for k, (c, q, a) in enumerate(part)]
        if spec["blacklist"]:
            dropped = {i for i, _, q, _ in rows_split if is_malformed_clue(q)}
            if dropped:
                log.info("%s: %s split: dropped %d malformed clues (indices %s)", name, split, len(dropped),
                         sorted(dropped))
            rows_split = [r for r in rows_split if r[0] not in dropped]
        items += [make_item(f"{name}-{i}", name, c, q, None, a, [a], split) for i, c, q, a in rows_split]
    return frame(items)


def load(name: str, spec: dict) -> pd.DataFrame:
    rows, where = read_rows(name, spec, "train")
    return process(rows, name, spec, where)
