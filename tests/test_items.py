import pandas as pd
import pytest

from selfknow.items import (ItemError, bioasq_row, deduplicate, jeopardy_row, medxpertqa_row, mmlu_row,
                            sample_items, split_items, triviaqa_row, validate_items)


def test_triviaqa_row():
    r = {"question_id": "tc_1", "question": "Who?", "answer": {"value": "Paris", "aliases": ["Paris", "Paree"]}}
    it = triviaqa_row(r, "tqa", "test")
    assert it["answer"] == "Paris" and it["aliases"] == ["Paris", "Paree"] and it["choices"] is None


def test_jeopardy_prefix_and_links():
    r = {"category": "HISTORY", "question": "'This man crossed the Rubicon'", "answer": "Caesar"}
    assert jeopardy_row(r, "j", "test", 3)["question"] == "HISTORY: This man crossed the Rubicon"
    r2 = dict(r, question='<a href="http://x/y.jpg">This</a> painting')
    assert jeopardy_row(r2, "j", "test", 4) is None


def test_bioasq_types():
    f = {"id": "q1", "type": "factoid", "body": "Which gene?", "exact_answer": [["BRCA1", "brca-1"]]}
    it = bioasq_row(f, "bio", "test")
    assert it["aliases"] == ["BRCA1", "brca-1"] and it["question"].endswith("Just output one of the answers.")
    lst = {"id": "q2", "type": "list", "body": "Name genes", "exact_answer": [["A"], ["B", "b2"]]}
    assert bioasq_row(lst, "bio", "test")["aliases"] == ["A", "B", "b2"]
    assert bioasq_row({"id": "q3", "type": "yesno", "body": "?", "exact_answer": "yes"}, "bio", "test") is None


def test_mmlu_and_medxpertqa():
    it = mmlu_row({"subject": "anatomy", "question": "Q", "choices": ["a", "b", "c", "d"], "answer": 2}, "mmlu", "test", 7)
    assert it["answer"] == "C" and it["item_id"] == "anatomy-7"
    with pytest.raises(ItemError, match="row 8: expected 4 choices"):
        mmlu_row({"subject": "x", "question": "Q", "choices": ["a"], "answer": 0}, "mmlu", "test", 8)
    m = medxpertqa_row({"id": "m1", "question": "Q", "options": {"B": "b", "A": "a"}, "label": "B"}, "med", "test")
    assert m["choices"] == ["a", "b"] and m["answer"] == "B"


def _df(rows):
    base = dict(dataset="d", domain="x", question="q", choices=None, answer="a", aliases=["a"], split="test")
    return pd.DataFrame([{**base, **r} for r in rows])


def test_validate_bad_rows():
    with pytest.raises(ItemError, match="src: row 1 .*missing answer"):
        validate_items(_df([{"item_id": "1"}, {"item_id": "2", "answer": ""}]), "src")
    with pytest.raises(ItemError, match="src: row 1: duplicate item_id '1'"):
        validate_items(_df([{"item_id": "1"}, {"item_id": "1"}]), "src")
    with pytest.raises(ItemError, match="row 0 .*choices"):
        validate_items(_df([{"item_id": "1", "choices": ["a", "a"], "answer": "A"}]), "src")
    with pytest.raises(ItemError, match="not an option letter"):
        validate_items(_df([{"item_id": "1", "choices": ["a", "b"], "answer": "C"}]), "src")


def test_dedup_sample_split_deterministic():
    df = _df([{"item_id": str(i), "question": f"q{i % 50}", "domain": f"d{i % 5}"} for i in range(100)])
    d = deduplicate(df)
    assert len(d) == 50
    a, b = sample_items(d, 10, seed=42), sample_items(d, 10, seed=42)
    assert a.equals(b) and len(a) == 10 and not a.equals(sample_items(d, 10, seed=43))
    per = sample_items(d, 3, seed=1, stratify="domain")
    assert per.groupby("domain").size().tolist() == [3] * 5
    assert "5" not in set(sample_items(d, None, 0, blacklist=["5"])["item_id"])
    s = split_items(d, seed=0)
    assert len(s["train"]) + len(s["test"]) == 50 and not set(s["train"].item_id) & set(s["test"].item_id)
