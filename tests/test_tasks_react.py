"""Recorded ReAct trajectories: the score is the recorded success flag; malformed records are
named by file and row."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets.source import ItemError
from selfknow.stages.tasks import react


def _record(i, success, **kw):
    r = dict(id=f"q{i}", domain="chemistry", question=f"question {i}", success=success, model="m", config="zs",
             answer="Paris" if success else None,
             steps=[{"thought": "look it up", "action": "search[x]", "observation": "x is ..."},
                    {"thought": "done", "action": "finish[Paris]", "observation": None}])
    r.update(kw)
    return r


def test_the_score_is_the_recorded_success(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(_record(i, s)) + "\n" for i, s in enumerate([True, False, True])))
    df = react.load("react", {"path": str(path)})
    assert list(df.correct) == [1, 0, 1] and list(df.n_steps) == [2, 2, 2]
    assert list(df.answer) == ["Paris", "", "Paris"] and set(df.domain) == {"chemistry"}
    assert df.correct.mean() == pytest.approx(2 / 3)


@pytest.mark.parametrize("change, message", [
    (dict(success="yes"), r"row 2 \(id 'q1'\): success must be true or false"),
    (dict(steps=[]), r"row 2 \(id 'q1'\): steps must be a non-empty list"),
    (dict(steps=[{"thought": "t", "action": "a"}]), r"row 2 \(id 'q1'\): step 0 must have the keys"),
    (dict(steps=[{"thought": "t", "action": "a", "observation": None},
                 {"thought": "t", "action": "finish[x]", "observation": None}]),
     r"step 0: observation must be a string \(null only on the last step\)"),
    (dict(id="q0"), r"row 2 \(id 'q0'\): duplicate trajectory for model 'm', config 'zs'"),
])
def test_malformed_records_are_named(change, message):
    with pytest.raises(ItemError, match=message):
        react.process([_record(0, True), {**_record(1, True), **change}], "react", "fixture")
