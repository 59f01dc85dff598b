"""Table 34 (LADDER §F.4): profiles from each subject's train half predict the test half's
accuracy; hand-computed cases, and the MAE against the authors' released per-subject numbers
(../shared/data/ladder-selfbound/heldout_n6_extension.json)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO
from selfknow.config import ConfigError, validate_config
from selfknow.protocols.ladder import controls as C
from selfknow.protocols.ladder.heldout import (ESTIMATORS, predict_heldout, react_files, react_records,
                                               session_records, write_table34)
from selfknow.stages.datasets.source import ItemError


def _records(outcomes: dict[str, list[int]], model="m", config="c") -> pd.DataFrame:
    return pd.DataFrame([{"model": model, "config": config, "item_id": f"{d}{i}", "domain": d, "correct": y}
                         for d, ys in outcomes.items() for i, y in enumerate(ys)])


def _zs(profile: dict[str, float], model="m", config="c") -> pd.DataFrame:
    return pd.DataFrame([{"model": model, "config": config, "domain": d, "p_hat": p} for d, p in profile.items()])


def test_hand_computed_case_whatever_the_split():
    # every question of A right, of B wrong: each half has accuracy 1 on A and 0 on B
    recs = _records({"A": [1, 1, 1, 1], "B": [0, 0, 0, 0]})
    row = predict_heldout(recs, _zs({"A": 0.9, "B": 0.3}), seed=3).iloc[0]
    assert row["Global"] == pytest.approx(0.5)               # 0.5 predicted for both
    assert row["Count"] == pytest.approx(0.0)
    assert row["Beta"] == pytest.approx(0.25)                 # (2+1)/(2+2) = .75 on A, 1/4 on B
    assert row["ZS"] == pytest.approx((0.1 + 0.3) / 2)
    assert row["best"] == "Count"
    assert (row["n_subjects"], row["n_train"], row["n_test"]) == (2, 4, 4)


def test_estimators_on_the_train_half_score_the_test_half():
    rng = np.random.default_rng(0)
    outcomes = {d: list(rng.integers(0, 2, n)) for d, n in (("A", 9), ("B", 6), ("C", 3), ("D", 12))}
    recs = _records(outcomes)
    row = predict_heldout(recs, None, seed=11).iloc[0]
    train = recs[C.heldout_split(recs, 11)]
    test = recs[~C.heldout_split(recs, 11)]
    assert set(train["item_id"]).isdisjoint(test["item_id"])
    assert train.groupby("domain").size().to_dict() == {"A": 5, "B": 3, "C": 2, "D": 6}
    # the definitions, written out: subjects scored = >= 2 test records (C has 1)
    scored = [d for d, g in test.groupby("domain") if len(g) >= 2]
    acc = {d: test[test["domain"] == d]["correct"].mean() for d in scored}
    k = {d: train[train["domain"] == d]["correct"].sum() for d in scored}
    n = {d: (train["domain"] == d).sum() for d in scored}
    g = train["correct"].mean()
    assert row["n_subjects"] == 3
    assert row["train_accuracy"] == pytest.approx(g)
    assert row["Global"] == pytest.approx(np.mean([abs(g - acc[d]) for d in scored]))
    assert row["Count"] == pytest.approx(np.mean([abs(k[d] / n[d] - acc[d]) for d in scored]))
    assert row["Beta"] == pytest.approx(np.mean([abs((k[d] + 1) / (n[d] + 2) - acc[d]) for d in scored]))
    assert np.isnan(row["ZS"]) and row["best"] in ESTIMATORS


def test_one_row_per_configuration_and_the_split_is_shared():
    a = _records({"A": [1, 1, 0, 0], "B": [1, 0, 1, 0]}, model="m1", config="react")
    b = _records({"A": [1, 1, 0, 0], "B": [1, 0, 1, 0]}, model="m2", config="react")
    b2 = b.assign(config="act")
    out = predict_heldout(pd.concat([a, b, b2]), None, seed=5)
    assert list(zip(out["model"], out["config"])) == [("m1", "react"), ("m2", "act"), ("m2", "react")]
    # the same questions with the same outcomes are split the same way in every configuration
    assert out[list(ESTIMATORS[:3])].nunique().eq(1).all()


def test_a_zero_shot_profile_missing_a_subject_is_named():
    recs = _records({"A": [1, 1, 0, 0], "B": [1, 0, 1, 0]})
    with pytest.raises(ValueError, match=r"model 'm', config 'c' has no estimate for subjects \['B'\]"):
        predict_heldout(recs, _zs({"A": 0.5}), seed=1)


def _trajectory(i, domain, success, model="m", config="react"):
    return {"id": f"{domain}-{i}", "domain": domain, "question": f"q {domain} {i}", "success": success,
            "model": model, "config": config,
            "steps": [{"thought": "t", "action": "finish[x]", "observation": None}]}


def test_react_records_and_zero_shot_file(tmp_path, monkeypatch):
    """Recorded trajectories and their zero-shot profiles make Table 34, written through the one
    driver (its builder returns a `Built`)."""
    from ladder_fixtures import built_only

    (tmp_path / "test.jsonl").write_text("".join(
        json.dumps(_trajectory(i, d, s)) + "\n" for d in ("A", "B") for i, s in enumerate([d == "A"] * 4)))
    assert react_records("react", {"loader": "react", "path": str(tmp_path / "test.jsonl")})[1] is None
    (tmp_path / "zero_shot.jsonl").write_text("".join(json.dumps({"model": "m", "config": "react", "domain": d, "p_hat": p}) + "\n"
                          for d, p in (("A", 0.8), ("B", 0.4))))
    spec = {"loader": "react", "path": str(tmp_path)}
    assert [f.name for f in react_files(spec)] == ["test.jsonl", "zero_shot.jsonl"]
    records, zero_shot = react_records("react", spec)
    assert records["correct"].tolist() == [1] * 4 + [0] * 4 and len(zero_shot) == 2
    out_csv, out_md = tmp_path / "t34.csv", tmp_path / "t34.md"
    called = built_only(monkeypatch)
    summary = write_table34({"table34_csv": str(out_csv), "table34_md": str(out_md)}, seed=0, source="react",
                            dataset="react", react_specs=[spec])
    table = pd.read_csv(out_csv)
    assert table.loc[0, "ZS"] == pytest.approx((0.2 + 0.4) / 2) and table.loc[0, "best"] == "Count"
    assert summary == {"configurations": 1, "records": 8, "best_Global": 0, "best_Count": 1, "best_Beta": 0,
                       "best_ZS": 0}
    assert called == ["selfknow.protocols.ladder.heldout:table34"]
    assert out_md.read_text().startswith("### LADDER Table 34: held-out prediction (MAE)\n")
    assert "recorded ReAct trajectories" in out_md.read_text()


@pytest.mark.parametrize("row, message", [
    ({"model": "m", "config": "react", "domain": "A", "p_hat": 1.5}, r"zero-shot profiles: \S+zero_shot.jsonl: line 2: p_hat must be a number in \[0, 1\]"),
    ({"model": "m", "config": "react", "domain": "A", "p_hat": 0.2}, r"zero-shot profiles: \S+zero_shot.jsonl: line 2: a second estimate for model 'm'"),
    ({"model": "m", "config": "react", "p_hat": 0.2}, r"zero-shot profiles: \S+zero_shot.jsonl: line 2: missing field\(s\) \['domain'\]"),
])
def test_malformed_zero_shot_rows_are_named(tmp_path, row, message):
    (tmp_path / "test.jsonl").write_text(json.dumps(_trajectory(0, "A", True)) + "\n")
    (tmp_path / "zero_shot.jsonl").write_text(json.dumps({"model": "m", "config": "react", "domain": "A", "p_hat": 0.5}) + "\n"
                  + json.dumps(row) + "\n")
    with pytest.raises(ItemError, match=message):
        react_records("react", {"loader": "react", "path": str(tmp_path)})


def test_session_records_keep_each_question_once_with_the_model_prior():
    turns = pd.DataFrame({"model": "wm", "session_id": ["0", "0", "1"], "item_id": ["q1", "q2", "q1"],
                          "domain": ["A", "B", "A"], "correct": [True, False, True]})
    profiles = pd.DataFrame({"model": "wm", "method": ["zs_prior", "zs_prior", "zs_prior", "lsa"],
                             "session_id": ["*", "*", "0", "0"], "domain": ["A", "B", "A", "A"],
                             "p_hat": [0.7, 0.2, 0.7, 0.9]})
    records, zero_shot = session_records(turns, profiles)
    assert records[["item_id", "correct"]].values.tolist() == [["q1", 1], ["q2", 0]]
    assert zero_shot[["domain", "p_hat"]].values.tolist() == [["A", 0.7], ["B", 0.2]]


def _released(shared_data):
    path = shared_data / "ladder-selfbound" / "heldout_n6_extension.json"
    if not path.exists():
        pytest.skip("heldout_n6_extension.json absent")
    return json.loads(path.read_text())


def test_mae_reproduces_the_authors_released_profile_scores(shared_data):
    """The released file carries, per model and benchmark, each subject's correct/n and the
    zero-shot profile, with CBF = 1 - MAE (rounded to 3 decimals; accuracies too). No ReAct
    records are released, so this checks Table 34's scoring (C.mae over per-subject records)
    on the inputs the file does carry."""
    released = _released(shared_data)
    checked = 0
    for model, tasks in released.items():
        for task, key in (("bbh", "per_task"), ("mmlu_pro", "per_cat")):
            entry = tasks[task]
            recs = _records({d: [1] * v["correct"] + [0] * (v["n"] - v["correct"]) for d, v in entry[key].items()},
                            model=model, config=task)
            assert 1 - C.mae(entry["zs"], recs["domain"], recs["correct"].astype(bool)) == pytest.approx(
                entry["cbf"], abs=1e-3), (model, task)
            checked += 1
    assert checked == 4


def test_the_react_dataset_must_be_recorded_trajectories_with_a_path():
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["ladder"]["react_dataset"] = "react"
    with pytest.raises(ConfigError, match=r"ladder.react_dataset: unknown dataset 'react'"):
        validate_config(json.loads(json.dumps(cfg)), "cfg.yaml")
    cfg["datasets"]["react"] = {"loader": "react"}
    with pytest.raises(ConfigError, match=r"datasets.react: the react loader needs 'path'"):
        validate_config(json.loads(json.dumps(cfg)), "cfg.yaml")
    cfg["ladder"]["react_dataset"] = "world_mcq"
    cfg["datasets"]["react"]["path"] = "data/react"
    with pytest.raises(ConfigError, match=r"dataset 'world_mcq' has loader 'world_mcq'; Table 34 needs loader react"):
        validate_config(json.loads(json.dumps(cfg)), "cfg.yaml")
    cfg["ladder"]["react_dataset"] = "react"
    assert validate_config(json.loads(json.dumps(cfg)), "cfg.yaml")["ladder"]["react_dataset"] == "react"


def test_offline_table34_names_who_stated_each_zs_prior(tmp_path):
    """The offline analogue's ZS is the prior stated for a model, by a prompted model when the
    model is a base LM: the note names that model, never calling it the model's own prior."""
    from selfknow.records import write_parquet

    turns = pd.DataFrame({"model": "wm", "session_id": "0", "item_id": ["q1", "q2", "q3", "q4"],
                          "domain": ["A", "A", "B", "B"], "correct": [True, False, True, True]})
    profiles = pd.DataFrame({"model": "wm", "method": "zs_prior", "session_id": "*", "domain": ["A", "B"],
                             "p_hat": [0.7, 0.2]})
    write_parquet(turns, str(tmp_path / "turns.parquet"))
    write_parquet(profiles, str(tmp_path / "profiles.parquet"))
    md = tmp_path / "t34.md"
    write_table34({"table34_csv": str(tmp_path / "t34.csv"), "table34_md": str(md)}, seed=0, source="sessions",
                  dataset="world_qa", turns_paths=[str(tmp_path / "turns.parquet")],
                  profiles_paths=[str(tmp_path / "profiles.parquet")], stated_by={"wm": "chat-lm"})
    text = " ".join(md.read_text().split())
    assert "(wm: stated by chat-lm)" in text
    assert "own prior" not in text and "model's L1" not in text
