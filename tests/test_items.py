import pandas as pd
import pytest

from selfknow.stages.items import ItemError, deduplicate, sample_items, split_items, validate_items


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


def test_reserved_in_context_examples_are_never_sampled():
    df = _df([{"item_id": "icl0", "split": "icl"}, {"item_id": "a", "split": "train"}, {"item_id": "b", "split": "train"}])
    assert list(sample_items(df, None, seed=0).item_id) == ["a", "b"]
    assert set(sample_items(df, 1, seed=0).item_id) <= {"a", "b"}
