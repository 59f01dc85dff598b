"""TriviaQA as persistent §A.4 and the authors' conset/dataset_configs/triviaqa.py process it,
on fixtures in mandarjoshi/trivia_qa's rc.nocontext row schema; expected items by hand."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from selfknow.stages.datasets import triviaqa
from selfknow.stages.datasets.source import ItemError
from selfknow.stages.items import build_items
from selfknow.protocols.persistent.prompts import select_icl_examples

# datasets.Dataset.shuffle(seed=17): shuffled position p holds row PERM[n][p]
PERM = {6: [1, 0, 4, 2, 5, 3], 8: [1, 0, 6, 4, 2, 7, 5, 3]}

VAL_SHUFFLED = [("va", "Q va?", "A"), ("vb", "Q vb?", "B"), ("vdup", "  Q va?  ", "A2"),
                ("vc", "Which is the longest length below?", "x"),  # blacklisted by the authors
                ("vd", "Q vd?", "D"), ("ve", "Q ve?", "E")]
TRAIN_SHUFFLED = [("ta", "Q ta?", "TA"), ("tb", "Q tb?", "TB"), ("tc", "Q tc?", "TC"), ("td", "Q td?", "TD"),
                  ("tdup", "Q td?", "TD2"), ("te", "Q te?", "TE"), ("tf", "Q tf?", "TF"), ("tg", "Q tg?", "TG")]


def hub_rows(shuffled) -> list[dict]:
    rows = [None] * len(shuffled)
    for p, (qid, q, a) in enumerate(shuffled):
        rows[PERM[len(shuffled)][p]] = {
            "question_id": qid, "question": q, "question_source": "http://www.quizballs.com/",
            "entity_pages": {"doc_source": [], "filename": [], "title": [], "wiki_context": []},
            "search_results": {"description": [], "filename": [], "rank": [], "title": [], "url": [],
                               "search_context": []},
            "answer": {"aliases": [a.lower(), f" {a} "], "normalized_aliases": [a.lower()], "matched_wiki_entity_name": "",
                       "normalized_matched_wiki_entity_name": "", "normalized_value": a.lower(), "type": "WikipediaEntity",
                       "value": f" {a} "}}
    return rows


SPEC = dict(loader="triviaqa", shuffle_seed=17, n_icl=2, reserved_icl=3, train_range=[0, 4], test_range=[4, 9],
            blacklist=True)


def test_evaluation_list_icl_splits_and_blacklist():
    df = triviaqa.process(hub_rows(VAL_SHUFFLED), hub_rows(TRAIN_SHUFFLED), "tqa", SPEC, ("val", "train"))
    # validation: 6 rows -> 5 unique (va vb vc vd ve); train: 8 -> 7 unique (ta..tg)
    # in-context: train's first 2; evaluation: validation (5) + train after its first 3 (td te tf tg)
    icl = df[df.split == "icl"]
    assert list(zip(icl.question, icl.answer)) == [("Q ta?", "TA"), ("Q tb?", "TB")]
    assert list(icl.item_id) == ["tqa-icl0", "tqa-icl1"]
    # train = evaluation[0:4] = va vb vc vd minus the blacklisted vc; test = [4:9] = ve td te tf tg
    assert list(df[df.split == "train"].item_id) == ["va", "vb", "vd"]
    assert list(df[df.split == "test"].item_id) == ["ve", "td", "te", "tf", "tg"]
    first = df[df.item_id == "va"].iloc[0]
    assert first.answer == "A" and list(first.aliases) == ["A", "a"] and first.question == "Q va?"


def test_without_blacklist_the_question_stays():
    df = triviaqa.process(hub_rows(VAL_SHUFFLED), hub_rows(TRAIN_SHUFFLED), "tqa", {**SPEC, "blacklist": False},
                          ("val", "train"))
    assert list(df[df.split == "train"].item_id) == ["va", "vb", "vc", "vd"]


def test_icl_beyond_the_reserved_head_is_an_error():
    with pytest.raises(ItemError, match="n_icl 4 exceeds reserved_icl 3"):
        triviaqa.process(hub_rows(VAL_SHUFFLED), hub_rows(TRAIN_SHUFFLED), "tqa", {**SPEC, "n_icl": 4}, ("v", "t"))


def test_malformed_answer_names_the_split_and_row():
    rows = hub_rows(VAL_SHUFFLED)
    rows[2]["answer"] = "Paris"
    with pytest.raises(ItemError, match=r"val: row 3: 'answer' must be an object with a 'value'"):
        triviaqa.process(rows, hub_rows(TRAIN_SHUFFLED), "tqa", SPEC, ("val", "train"))


def test_local_copy_jsonl_and_parquet_splits(tmp_path):
    with open(tmp_path / "validation.jsonl", "w", encoding="utf-8") as f:
        for r in hub_rows(VAL_SHUFFLED):
            f.write(json.dumps(r) + "\n")
    pd.DataFrame(hub_rows(TRAIN_SHUFFLED)).to_parquet(tmp_path / "train.parquet")
    splits = build_items("tqa", {**SPEC, "path": str(tmp_path)}, seed=0)
    assert list(splits["train"].item_id) == ["tqa-icl0", "tqa-icl1", "va", "vb", "vd"]
    assert list(splits["test"].item_id) == ["ve", "td", "te", "tf", "tg"]
    assert select_icl_examples(splits["train"], 2, seed=0) == [("Q ta?", "TA"), ("Q tb?", "TB")]
