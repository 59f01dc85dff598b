"""Jeopardy as persistent §A.4 and the authors' conset/dataset_configs/jeopardy.py process it,
on a 16-row fixture in soldni/jeopardy's row schema whose expected items are derived by hand."""
from __future__ import annotations

import pandas as pd
import pytest

from selfknow.stages.datasets import jeopardy
from selfknow.stages.datasets.source import ItemError
from selfknow.stages.generation import fixed_shots
from selfknow.stages.items import build_items, icl_by_domain, sample_items
from selfknow.protocols.persistent.prompts import select_icl_examples

from conftest import SHARED
from fakes import sc_job_prompts

# datasets.Dataset.shuffle(seed=17) on 16 rows: shuffled position p holds row PERM16[p]
# (test_datasets_source checks this against numpy and `datasets`)
PERM16 = [15, 6, 13, 4, 14, 8, 9, 7, 1, 0, 12, 10, 2, 11, 5, 3]

# (ee-category, question, continuation) in shuffled order
SHUFFLED = [
    ("HISTORY", "'He crossed the Rubicon'", "Caesar"),                        # 0: in-context 1
    ("SCIENCE", "'H2O'", "water"),                                             # 1: in-context 2
    ("HISTORY", '\'<a href="http://j-archive.com/x.jpg">This</a> fort\'', "Alamo"),  # 2: HTML link
    ("RHYME TIME", "'A fat cat'", "a fat cat"),                                # 3: excluded category
    ("SCIENCE", "'Au'", "gold"),                                               # 4: reserved, unused
    ("HISTORY", "  'He crossed the Rubicon'  ", "Julius Caesar"),             # 5: duplicate of 0
    ("OPERA", "'Carmen composer'", "Bizet"),                                   # 6: category too small
    ("HISTORY", "'1066 battle'", "Hastings"),                                  # 7: eval 0 (train)
    ("RHYME TIME", "'A wet pet'", "a wet pet"),                                # 8
    ("SCIENCE", "'The clue for this one is missing'", "none"),                 # 9: eval 1, malformed
    ("HISTORY", "'First US president'", "Washington"),                         # 10: eval 2 (train)
    ("OPERA", "'Tosca composer'", "Puccini"),                                  # 11
    ("RHYME TIME", "'A big pig'", "a big pig"),                                # 12
    ("SCIENCE", "Unquoted clue", "x"),                                         # 13: eval 3, malformed
    ("HISTORY", "'Year the Wall fell'", "1989"),                               # 14: eval 4 (test)
    ("SCIENCE", "'Fe'", "iron"),                                               # 15: eval 5 (test)
]


def hub_rows() -> list[dict]:
    rows = [None] * len(SHUFFLED)
    for p, (cat, q, a) in enumerate(SHUFFLED):
        rows[PERM16[p]] = {"category": cat.lower(), "ee-category": cat, "question": q, "continuation": a,
                           "air_date": "2004-12-31", "value": "$200"}
    return rows


SPEC = dict(loader="jeopardy", shuffle_seed=17, n_icl=2, reserved_icl=3, train_range=[0, 3], test_range=[3, 6],
            blacklist=True, min_category_count=3, exclude_categories=["RHYME TIME"], check_paper_categories=False)


def test_counts_order_icl_and_splits_follow_the_authors_rules():
    df = jeopardy.process(hub_rows(), "jeopardy", SPEC, "fixture")
    # 16 rows -> 15 without links -> 14 unique -> 9 in HISTORY (4) + SCIENCE (5)
    # -> in-context examples: the first 2; evaluation: after the first 3 (6 questions)
    icl = df[df.split == "icl"]
    assert list(icl.question) == ["[HISTORY] 'He crossed the Rubicon'", "[SCIENCE] 'H2O'"]
    assert list(icl.answer) == ["Caesar", "water"]
    # train = evaluation[0:3] minus the malformed clue at index 1; test = [3:6] minus index 3
    train, test = df[df.split == "train"], df[df.split == "test"]
    assert list(train.item_id) == ["jeopardy-0", "jeopardy-2"]
    assert list(train.question) == ["[HISTORY] '1066 battle'", "[HISTORY] 'First US president'"]
    assert list(test.item_id) == ["jeopardy-4", "jeopardy-5"]
    assert list(test.answer) == ["1989", "iron"] and list(test.domain) == ["HISTORY", "SCIENCE"]
    assert len(df) == 6


def test_without_blacklist_the_malformed_clues_stay():
    df = jeopardy.process(hub_rows(), "jeopardy", {**SPEC, "blacklist": False}, "fixture")
    assert list(df[df.split != "icl"].item_id) == [f"jeopardy-{i}" for i in range(6)]


def test_lower_threshold_keeps_opera_and_shifts_every_index():
    df = jeopardy.process(hub_rows(), "jeopardy", {**SPEC, "min_category_count": 2}, "fixture")
    # OPERA (2) now kept: questions H0 S1 S4 O6 H7 S9 H10 O11 S13 H14 S15 -> evaluation starts at O6
    assert list(df[df.split == "train"].question) == ["[OPERA] 'Carmen composer'", "[HISTORY] '1066 battle'"]


def test_category_list_must_be_the_papers_when_asked():
    with pytest.raises(ItemError, match=r"fixture: the kept categories differ .*: extra \[\], missing \['19th CENTURY AMERICA', "):
        jeopardy.process(hub_rows(), "jeopardy", {**SPEC, "check_paper_categories": True}, "fixture")


def test_paper_categories_are_table_5():
    """The 85 categories against the paper's Table 5 (title case there, the hub's case here;
    the issue's "86" miscounts: Table 5 and the authors' list both have 85)."""
    text = SHARED / "papers" / "001_0030a5d6f0c8dced.txt"
    if not text.exists():
        pytest.skip("../shared/papers is not beside this checkout")
    t = text.read_text(encoding="utf-8")
    start = t.index("Table 5: Jeopardy categories included in our evaluation.") + 57
    rest = f" {t[start:t.index('Table 6: BioASQ', start)].upper()} "
    for cat in sorted(jeopardy.PAPER_CATEGORIES, key=len, reverse=True):  # longest first: "ART & ARTISTS" before "ART"
        assert f" {cat.upper()} " in rest, cat
        rest = rest.replace(f" {cat.upper()} ", "  ", 1)
    assert rest.strip() == "" and len(jeopardy.PAPER_CATEGORIES) == 85
    assert not {"BEFORE & AFTER", "RHYME TIME", "STUPID ANSWERS", "COMMON BONDS", "HOMOPHONES"} & jeopardy.PAPER_CATEGORIES


def test_malformed_clue_in_context_examples_is_an_error():
    rows = hub_rows()
    rows[PERM16[1]] = {**rows[PERM16[1]], "question": "'Clue crew: the clue is missing'"}
    with pytest.raises(ItemError, match="malformed clue.*in-context"):
        jeopardy.process(rows, "jeopardy", SPEC, "fixture")


@pytest.mark.parametrize("question, malformed", [
    ("[HISTORY] 'A clue'", False),
    ("[HISTORY] A clue", True),
    ("[HISTORY] 'This clue's audio is missing'", True),
    ("[X] '", True),
])
def test_malformed_clue_rule(question, malformed):
    assert jeopardy.is_malformed_clue(question) is malformed


def test_missing_field_names_the_row():
    rows = hub_rows()
    del rows[3]["continuation"]
    with pytest.raises(ItemError, match=r"fixture: row 4: missing field\(s\) \['continuation'\]"):
        jeopardy.process(rows, "jeopardy", SPEC, "fixture")


def test_range_beyond_the_filtered_list_is_an_error():
    with pytest.raises(ItemError, match=r"test_range: range \[3, 7\] needs 7 questions, only 6 remain"):
        jeopardy.process(hub_rows(), "jeopardy", {**SPEC, "test_range": [3, 7]}, "fixture")


def test_local_copy_route_gives_train_file_with_icl_first_and_prompts_use_them(tmp_path):
    pd.DataFrame(hub_rows()).to_parquet(tmp_path / "train.parquet")
    splits = build_items("jeopardy", {**SPEC, "path": str(tmp_path)}, seed=0)
    train = splits["train"]
    assert list(train.split) == ["icl", "icl", "train", "train"]
    assert list(splits["test"].item_id) == ["jeopardy-4", "jeopardy-5"]
    # the prompt takes the reserved examples in order; sampling never returns them
    assert select_icl_examples(train, 2, seed=123) == [("[HISTORY] 'He crossed the Rubicon'", "Caesar"),
                                                       ("[SCIENCE] 'H2O'", "water")]
    assert fixed_shots(train, 2, seed=5) == select_icl_examples(train, 2, seed=0)
    with pytest.raises(ItemError, match="reserve 2 in-context examples; 5 are asked for"):
        select_icl_examples(train, 5, seed=0)
    assert list(sample_items(train, None, seed=0).item_id) == ["jeopardy-0", "jeopardy-2"]


def test_every_question_is_prompted_with_the_same_reserved_examples(tmp_path, monkeypatch):
    # the test questions' categories (HISTORY, SCIENCE) are those of the two examples: each
    # question still gets both, in order, as the authors' one ICL block
    pd.DataFrame(hub_rows()).to_parquet(tmp_path / "train.parquet")
    spec = {**SPEC, "path": str(tmp_path)}
    splits = build_items("jeopardy", spec, seed=0)
    assert list(splits["test"].domain) == ["HISTORY", "SCIENCE"] and not icl_by_domain(spec)
    block = "Prompt: [HISTORY] 'He crossed the Rubicon'\nAnswer: Caesar\n\nPrompt: [SCIENCE] 'H2O'\nAnswer: water\n\n"
    prompts = sc_job_prompts(tmp_path / "job", monkeypatch, splits, n_shots=2, icl_by_domain=icl_by_domain(spec))
    assert prompts == {"[HISTORY] 'Year the Wall fell'": block + "Prompt: [HISTORY] 'Year the Wall fell'\nAnswer:",
                       "[SCIENCE] 'Fe'": block + "Prompt: [SCIENCE] 'Fe'\nAnswer:"}
