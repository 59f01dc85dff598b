"""MMLU for LADDER: the released pool is items 40-64 of each of 20 subjects' test rows
(yin1245/selfbound); fixtures in cais/mmlu's row schema."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from selfknow.stages.datasets import mmlu
from selfknow.stages.datasets.source import ItemError
from selfknow.stages.items import build_items, sample_items
from selfknow.protocols.ladder.records import read_released_sessions

from conftest import REPO

SPEC = dict(loader="mmlu", subjects=["anatomy", "astronomy"], subject_range=[2, 4])


def _rows(subject: str, n: int, start: int = 0) -> list[dict]:
    return [{"question": f"{subject} q{k}", "subject": subject, "choices": ["w", "x", "y", "z"], "answer": k % 4}
            for k in range(start, start + n)]


def test_positions_within_each_subject_in_file_order():
    rows = _rows("anatomy", 5) + _rows("virology", 5) + _rows("astronomy", 3) + _rows("astronomy", 2, start=3)
    df = mmlu.process(rows, "mmlu", SPEC, "fixture")
    assert list(df.item_id) == ["anatomy-2", "anatomy-3", "astronomy-2", "astronomy-3"]
    assert list(df.question) == ["anatomy q2", "anatomy q3", "astronomy q2", "astronomy q3"]
    assert list(df.answer) == ["C", "D", "C", "D"] and set(df.split) == {"test"}


def test_subject_shorter_than_the_range_is_an_error():
    with pytest.raises(ItemError, match=r"fixture: subject\(s\) \['astronomy'\] have fewer than 4 rows"):
        mmlu.process(_rows("anatomy", 5) + _rows("astronomy", 3), "mmlu", SPEC, "fixture")
    bad = _rows("anatomy", 5) + _rows("astronomy", 5)
    bad[3]["choices"] = ["a", "b"]
    with pytest.raises(ItemError, match="fixture: row 4: expected 4 choices, got 2"):
        mmlu.process(bad, "mmlu", SPEC, "fixture")


# ---- the released LADDER question set ------------------------------------------------------------

def _released_turns(shared_data: Path) -> pd.DataFrame:
    files = sorted((shared_data / "ladder-selfbound" / "sessions").glob("capbound_sessions_*.json"))
    assert files, "no released session files"
    return pd.concat([read_released_sessions(f) for f in files], ignore_index=True)


def _paper_mmlu_spec() -> dict:
    with open(REPO / "config" / "paper.yaml", encoding="utf-8") as f:
        return dict(yaml.safe_load(f)["datasets"]["mmlu"])


def _pool(rows: list[dict], tmp_path: Path) -> pd.DataFrame:
    pd.DataFrame(rows).to_parquet(tmp_path / "test.parquet")
    spec = {k: v for k, v in _paper_mmlu_spec().items() if k not in ("hub_id", "config_name", "revision")}
    items = build_items("mmlu", {**spec, "path": str(tmp_path)}, seed=0)["test"]
    # the LADDER jobs draw items_per_domain (25) per subject from this file: all of them
    return sample_items(items, 25, seed=0, stratify="domain")


def _check_released_in_pool(turns: pd.DataFrame, pool: pd.DataFrame) -> None:
    """Every released turn is a pool item with its reference letter. The released questions are
    cut at 200 characters, so several items can share one released text (formal_logic)."""
    answers: dict[tuple[str, str], set[str]] = {}
    for d, q, a in zip(pool.domain, pool.question, pool.answer):
        answers.setdefault((d, q[:200]), set()).add(a)
    missing = [(d, q) for d, q in zip(turns.domain, turns.question) if (d, q) not in answers]
    assert not missing, f"{len(missing)} released questions are not in the pool, e.g. {missing[:2]}"
    wrong = [(d, q) for d, q, r in zip(turns.domain, turns.question, turns.reference) if r not in answers[(d, q)]]
    assert not wrong, f"{len(wrong)} released questions have another reference answer, e.g. {wrong[:2]}"


def _mmlu_turns(shared_data: Path) -> pd.DataFrame:
    turns = _released_turns(shared_data)
    subjects = _paper_mmlu_spec()["subjects"]
    # Upstream quirk: the Llama-3-8B file also has turns from a non-MMLU "math_word_problems" domain.
    assert set(turns.domain) - set(subjects) <= {"math_word_problems"}
    assert set(turns.domain) & set(subjects) == set(subjects)
    return turns[turns.domain.isin(subjects)]


def test_paper_config_pool_holds_every_released_question(shared_data, tmp_path):
    """The paper config's subjects and range against the released sessions, through the loader's
    local-copy route on a stand-in test split laid out like cais/mmlu: per subject 40 other
    rows, then the released questions (with their reference letters) and other rows up to 25,
    then more rows. (The same check on the real split: SELFKNOW_MMLU_DIR, next test.)"""
    turns = _mmlu_turns(shared_data)
    start, stop = _paper_mmlu_spec()["subject_range"]
    assert (start, stop) == (40, 65)
    rows = []
    for subject, g in turns.groupby("domain", sort=True):
        released = g.drop_duplicates(["question", "reference"])
        assert len(released) <= stop - start, subject
        block = [{"question": q, "subject": subject, "choices": ["a", "b", "c", "d"], "answer": "ABCD".index(r)}
                 for q, r in zip(released.question, released.reference)]
        block += _rows(subject, stop - start - len(block), start=1000)
        rows += _rows(subject, start) + block + _rows(subject, 10, start=2000)
    pool = _pool(rows, tmp_path)
    assert len(pool) == 25 * 20
    _check_released_in_pool(turns, pool)


@pytest.mark.skipif(not os.environ.get("SELFKNOW_MMLU_DIR"),
                    reason="set SELFKNOW_MMLU_DIR to a local copy of cais/mmlu (all) with test.parquet")
def test_real_mmlu_pool_holds_every_released_question(shared_data, tmp_path):
    src = Path(os.environ["SELFKNOW_MMLU_DIR"]) / "test.parquet"
    rows = pd.read_parquet(src).to_dict("records")
    _check_released_in_pool(_mmlu_turns(shared_data), _pool(rows, tmp_path))
