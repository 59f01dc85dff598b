"""The ReAct agent that produces Table 34's records (LADDER §4.4, §F.4): step parsing, the
calculator tool, tool errors, the step limit and success, on a scripted fake model; and the
records it writes feed the Table 34 code."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from fakes import ScriptedLM
from selfknow.protocols.ladder import react_agent as RA
from selfknow.protocols.ladder.heldout import react_records, write_table34
from selfknow.records import ITEM_COLUMNS, write_parquet


@pytest.mark.parametrize("reply, expected", [
    ("Thought: 6 times 7.\nAction: calculate[6*7]", ("6 times 7.", "calculate", "6*7")),
    (" I know it.\nAction: Finish[ B ]", ("I know it.", "finish", "B")),
    ("Thought: a\nAction: calculate[1+1]\nObservation: 3\nThought: b\nAction: finish[C]", ("a", "calculate", "1+1")),
    ("Thought: no action here", ("no action here", None, "")),
])
def test_parse_step(reply, expected):
    assert RA.parse_step(reply) == expected


@pytest.mark.parametrize("expr, value", [("6*7", "42"), ("2 * (3 + 4) - 1", "13"), ("7/2", "3.5"), ("-2**3", "-8"),
                                         ("10 % 4", "2"), ("0.1+0.2", "0.3")])
def test_calculate(expr, value):
    assert RA.calculate(expr) == value


@pytest.mark.parametrize("expr, message", [("1/0", "division by zero"), ("__import__('os')", "unsupported"),
                                           ("2**10**6", "exponent"), ("2 +", "cannot parse"), ("True+1", "unsupported")])
def test_calculate_refuses(expr, message):
    with pytest.raises(RA.ToolError, match=message):
        RA.calculate(expr)


def _items() -> pd.DataFrame:
    rows = []
    for i in range(4):  # "arith": solvable with the calculator; "loop": the agent never finishes
        rows.append({"item_id": f"a{i}", "domain": "arith", "question": f"What is 6*{i + 2}?",
                     "choices": [str(6 * (i + 2) + d) for d in (-1, 0, 1, 2)], "answer": "B"})
        rows.append({"item_id": f"l{i}", "domain": "loop", "question": f"Loop {i}?", "choices": ["x", "y", "z", "w"],
                     "answer": "A"})
    return pd.DataFrame([{**r, "dataset": "d", "aliases": [], "split": "test"} for r in rows])[ITEM_COLUMNS]


def _respond(prompt: str) -> str:
    if "calculate[expression]" not in prompt:  # the L1 prior
        return json.dumps({"arith": 0.9, "loop": 0.4})
    question = prompt.split("Question: ")[1].split("\n")[0]
    if question.startswith("Loop"):
        return "Thought: try.\nAction: calculate[1/0]" if "Loop 0" in question else "Thought: hmm, unsure"
    if "Observation: " in prompt:
        return "Thought: that is option B.\nAction: finish[B]\nObservation: (self-written, cut)"
    return f"Thought: multiply.\nAction: calculate[{question[8:-1]}]\nObservation: 1000"


def test_agent_loop_on_a_scripted_model():
    lm = ScriptedLM(_respond)
    runs = RA.run_agent(lm, _items(), max_steps=3, max_new_tokens=64, chat=True)
    by_id = {t.item["item_id"]: t for t in runs}
    solved = by_id["a1"]
    assert solved.answer == "B" and solved.record("m", "c")["success"] is True
    assert solved.steps == [{"thought": "multiply.", "action": "calculate[6*3]", "observation": "18"},
                            {"thought": "that is option B.", "action": "finish[B]", "observation": None}]
    # the second step's prompt shows the tool's observation, not the model's self-written one
    assert "Observation: 18" in lm.prompts[[i for i, p in enumerate(lm.prompts) if "6*3" in p][-1]]
    err = by_id["l0"]  # a tool error is an observation; the step limit ends the run as a failure
    assert [s["observation"] for s in err.steps] == ["Error: division by zero"] * 3
    assert err.answer is None and err.record("m", "c")["success"] is False
    invalid = by_id["l1"]
    assert len(invalid.steps) == 3 and invalid.steps[0]["observation"].startswith("Invalid action")
    assert invalid.steps[0]["action"] == "" and invalid.steps[0]["thought"] == "hmm, unsure"
    # finished runs leave the batch: 8 prompts at step 1, 8 at step 2, 4 (loops) at step 3
    assert len(lm.prompts) == 8 + 8 + 4


def test_unknown_tool_and_wrong_answer():
    t = RA.Trajectory({"item_id": "q", "domain": "d", "question": "?", "choices": ["a", "b"], "answer": "A"})
    t.act("Thought: look.\nAction: search[x]")
    assert t.steps[0]["observation"].startswith("Error: unknown tool 'search'")
    t.act("Action: finish[the answer is (B)]")
    assert t.answer == "B" and t.record("m", "c")["success"] is False


def test_react_job_records_feed_table34(tmp_path, monkeypatch):
    items = tmp_path / "items.parquet"
    write_parquet(_items(), str(items))
    import selfknow.models

    monkeypatch.setattr(selfknow.models, "load_lm", lambda spec, checkpoint, cache_dir=None: ScriptedLM(_respond))
    out = tmp_path / "react" / "m" / "c3"
    summary = RA.react_job(str(items), {"backend": "openai", "name": "m"}, str(out), model="m", config="c3",
                           per_domain=4, max_steps=3, max_new_tokens=64, prior_mode="json", prior_max_new_tokens=64,
                           seed=0)
    assert (summary["records"], summary["successes"], summary["finished"]) == (8, 4, 4)
    spec = {"loader": "react", "path": str(out)}
    records, zero_shot = react_records("mmlu", spec)
    assert records.groupby("domain")["correct"].sum().to_dict() == {"arith": 4, "loop": 0}
    assert dict(zip(zero_shot["domain"], zero_shot["p_hat"])) == {"arith": 0.9, "loop": 0.4}
    csv, md = tmp_path / "t34.csv", tmp_path / "t34.md"
    write_table34({"table34_csv": str(csv), "table34_md": str(md)}, seed=0, source="agent", dataset="mmlu",
                  react_specs=[spec])
    row = pd.read_csv(csv).iloc[0]
    # each subject's accuracy is 1 or 0 in both halves: Count is exact, ZS misses by .1 and .4
    assert (row["model"], row["config"], row["n_train"], row["n_test"]) == ("m", "c3", 4, 4)
    assert row["Count"] == pytest.approx(0.0) and row["ZS"] == pytest.approx((0.1 + 0.4) / 2)
    assert "this workflow ran" in md.read_text()


def test_pick_items_draws_per_subject_with_the_seed():
    items = _items()
    a, b = RA.pick_items(items, 2, seed=1), RA.pick_items(items, 2, seed=1)
    assert a["item_id"].tolist() == b["item_id"].tolist()
    assert a.groupby("domain").size().to_dict() == {"arith": 2, "loop": 2}
    assert len(RA.pick_items(items, 10, seed=1)) == 8
