"""Reading a dataset's rows: the hub shuffle reproduced without `datasets`, local copies, and
the hub route itself on a local stand-in laid out as a hub dataset repository."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from selfknow.stages.datasets.source import ItemError, hf_shuffle_order, read_rows


def test_shuffle_order_is_the_hub_shuffle():
    # literal: the orders the loader tests lay their fixtures out by
    assert hf_shuffle_order(6, 17).tolist() == [1, 0, 4, 2, 5, 3]
    assert hf_shuffle_order(16, 17).tolist() == [15, 6, 13, 4, 14, 8, 9, 7, 1, 0, 12, 10, 2, 11, 5, 3]
    datasets = pytest.importorskip("datasets")
    for n, seed in ((16, 17), (1000, 17), (257, 3)):
        ds = datasets.Dataset.from_dict({"i": list(range(n))}).shuffle(seed=seed)
        assert list(ds["i"]) == hf_shuffle_order(n, seed).tolist()


def test_local_copy_errors_name_the_file(tmp_path):
    with pytest.raises(ItemError, match=f"d: {tmp_path} has no train.parquet or train.jsonl"):
        read_rows("d", {"path": str(tmp_path)}, "train")
    bad = tmp_path / "test.jsonl"
    bad.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    with pytest.raises(ItemError, match=f"d: {bad}: line 2: invalid JSON"):
        read_rows("d", {"path": str(bad)}, "test")
    with pytest.raises(ItemError, match="does not exist"):
        read_rows("d", {"path": str(tmp_path / "nope.parquet")}, "test")


def test_hub_route_on_a_local_repository_layout(tmp_path, monkeypatch):
    """`datasets.load_dataset(hub_id, config_name, split=..., revision=...)` as the loader calls
    it, on a directory laid out as a hub dataset repository with a named config (as
    soldni/jeopardy's `all_questions`), offline."""
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "soldni--jeopardy"
    (repo / "data").mkdir(parents=True)
    rows = [{"question": f"'clue {i}'", "ee-category": "HISTORY", "continuation": f"a{i}"} for i in range(5)]
    pd.DataFrame(rows).to_parquet(repo / "data" / "all_questions-train.parquet")
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: all_questions\n  data_files:\n"
                                    "  - split: train\n    path: data/all_questions-train.parquet\n---\n", encoding="utf-8")
    got, where = read_rows("jeopardy", {"hub_id": str(repo), "config_name": "all_questions", "revision": "main"}, "train")
    assert got == rows and "all_questions" in where and "main" in where


def test_jsonl_directory_copy(tmp_path):
    (tmp_path / "test.jsonl").write_text("\n".join(json.dumps({"k": i}) for i in range(3)) + "\n", encoding="utf-8")
    rows, where = read_rows("d", {"path": str(tmp_path)}, "test")
    assert rows == [{"k": 0}, {"k": 1}, {"k": 2}] and where.endswith("test.jsonl")
