"""LADDER sessions from any source in the documented session format (docs/own-results.md,
`records.read_session_table`), scored by `selfknow ladder-eval` and the workflow's importer
with the same `tables.import_job`.

Round trips: the released sessions written as session tables score exactly as the released
JSON files do; the tiny run's live sessions written as a CSV score exactly as the workflow's
own score job scored them. Malformed tables stop with file, row and column named."""
import re

import numpy as np
import pandas as pd
import pytest

from selfknow.cli import main
from selfknow.protocols.ladder.aggregate import authors_aggregates, score_sessions
from selfknow.protocols.ladder.records import REQUIRED_COLUMNS, TURN_COLUMNS, import_sessions, read_session_table
from selfknow.protocols.ladder.tables import IMPORT_ESTIMATORS
from selfknow.records import write_record_table


@pytest.fixture(scope="module")
def released_turns(shared_data):
    d = shared_data / "ladder-selfbound" / "sessions"
    if not d.is_dir():
        pytest.skip("ladder-selfbound data absent")
    turns = import_sessions(d)
    # two models (Llama-3-8B with its unparsed answers and math word problems), 8 sessions each
    keep = turns["model"].isin(["Llama-3-8B", "gpt-5.5"]) & turns["session_id"].isin([str(i) for i in range(8)])
    return turns[keep].reset_index(drop=True)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_released_sessions_as_a_session_table_score_exactly_as_the_json(released_turns, tmp_path, suffix):
    path = tmp_path / f"sessions{suffix}"
    write_record_table(released_turns, path)
    back = read_session_table(path)
    assert list(back.columns) == TURN_COLUMNS and len(back) == len(released_turns) == 2 * 8 * 50
    for c in ("model", "session_id", "item_id", "domain", "feedback_text", "decoded_category"):
        assert back[c].tolist() == released_turns[c].tolist(), c
    assert np.array_equal(back["confidence"].to_numpy(float), released_turns["confidence"].to_numpy(float))
    ours = score_sessions(back, IMPORT_ESTIMATORS)
    theirs = score_sessions(released_turns, IMPORT_ESTIMATORS)
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    if suffix == ".csv":  # and the command's aggregate table is the importer's
        assert main(["ladder-eval", str(path), str(tmp_path / "out")]) == 0
        agg = pd.read_csv(tmp_path / "out" / "import_aggregates.csv")
        pd.testing.assert_frame_equal(agg, authors_aggregates(theirs).reset_index(drop=True), check_exact=True)


def test_tiny_runs_sessions_as_csv_score_as_the_workflow_scored_them(tiny_run, tmp_path, capsys):
    main_sessions = pd.read_parquet(tiny_run / "ladder" / "sessions" / "wm-small" / "main.parquet")
    write_record_table(main_sessions[REQUIRED_COLUMNS], tmp_path / "sessions.csv")  # only what is required
    assert main(["ladder-eval", str(tmp_path / "sessions.csv"), str(tmp_path / "out")]) == 0
    assert "3 sessions of 1 models, 9 (model, estimator) rows" in capsys.readouterr().out
    ours = pd.read_csv(tmp_path / "out" / "sessions.csv", dtype={"session_id": str})
    workflow = pd.read_parquet(tiny_run / "ladder" / "scores" / "wm-small" / "sessions.parquet")
    both = ours.merge(workflow, on=["model", "session_id", "estimator"], suffixes=("", "_workflow"), validate="1:1")
    assert len(both) == len(ours) == 3 * len(IMPORT_ESTIMATORS)
    for c in ("CBF", "norm_CBF", "bias", "shape_error", "kendall_tau", "ECE", "Brier", "AUROC", "HR", "conf_gap"):
        assert np.array_equal(both[c].to_numpy(float), both[f"{c}_workflow"].to_numpy(float), equal_nan=True), c


def _table(n_sessions=2, n_turns=6):
    rng = np.random.default_rng(1)
    rows = [dict(model="m", session_id=str(s), turn=t + 1, domain=f"d{t % 3}", confidence=float(rng.random()),
                 correct=bool(rng.random() < 0.5), feedback_text="That's right." if t % 2 else "Hmm, not sure.",
                 in_expertise=bool(t % 3 == 0)) for s in range(n_sessions) for t in range(n_turns)]
    return pd.DataFrame(rows)


BAD = [
    (lambda d: d.drop(columns="in_expertise"), r"missing column\(s\) \['in_expertise'\]"),
    (lambda d: d.assign(confidence=d["confidence"].astype(object).where(d.index != 3, "high")),
     r"line 5, column 'confidence': expected a number, got 'high'"),
    (lambda d: d.assign(confidence=d["confidence"].where(d.index != 2, 1.2)),
     r"line 4, column 'confidence': 1\.2 is not a probability in \[0, 1\]"),
    (lambda d: d.assign(correct=d["correct"].astype(object).where(d.index != 1, "maybe")),
     r"line 3, column 'correct': expected 0/1 or true/false, got 'maybe'"),
    (lambda d: d.assign(turn=d["turn"].where(d.index != 0, 0)), r"line 2, column 'turn': turns count from 1, got 0"),
    (lambda d: d.assign(turn=d["turn"].where(d.index != 4, 2)),
     r"line 6, column 'turn': a second turn 2 of session '0' of model 'm'"),
    (lambda d: d.assign(domain=d["domain"].where(d.index != 7, None)), r"line 9, column 'domain': missing or empty"),
]


@pytest.mark.parametrize("spoil,message", BAD, ids=[re.sub(r"\W+", "_", m[1])[-40:] for m in BAD])
def test_malformed_session_tables_name_file_row_and_column(tmp_path, capsys, spoil, message):
    spoil(_table()).to_csv(tmp_path / "s.csv", index=False)
    assert main(["ladder-eval", str(tmp_path / "s.csv"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.search(re.escape(str(tmp_path / "s.csv")) + ": " + message, err), err
    assert not (tmp_path / "out").exists()


def test_a_directory_mixes_released_files_and_session_tables(tmp_path):
    """`ladder_import_dir` and ladder-eval take a directory of both forms, recursively; an
    absent column defaults as documented; a session table counts 'true'/'false' and 0/1."""
    t = _table()
    (tmp_path / "sub").mkdir()
    write_record_table(t, tmp_path / "a.parquet")
    t.assign(model="m2", correct=t["correct"].map({True: "true", False: "0"})).to_csv(tmp_path / "sub" / "b.csv",
                                                                                     index=False)
    (tmp_path / "notes.txt").write_text("not a session file")
    turns = import_sessions(tmp_path)
    assert sorted(turns["model"].unique()) == ["m", "m2"] and len(turns) == 24
    assert (turns.groupby("model")["correct"].apply(list).loc["m2"] == t["correct"].tolist())
    assert turns["parsed"].all() and not turns["abstain"].any()
    assert turns["source"].tolist() == ["a.parquet"] * 12 + ["b.csv"] * 12
    assert turns["item_id"].tolist()[:2] == ["d0/1", "d1/2"]  # no question text: domain/turn
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no capbound_sessions_\*\.json files and no session tables"):
        import_sessions(tmp_path / "empty")


def test_ladder_eval_writes_the_import_entry_through_the_driver(tmp_path, monkeypatch, capsys):
    """`selfknow ladder-eval` writes the catalog's import table through the one driver (its
    builder returns a `Built`): the entry's title, the note naming the sessions, and the
    aggregates of the per-session scores it also writes."""
    from ladder_fixtures import built_only

    called = built_only(monkeypatch)
    _table().to_csv(tmp_path / "s.csv", index=False)
    assert main(["ladder-eval", str(tmp_path / "s.csv"), str(tmp_path / "out")]) == 0
    assert called == ["selfknow.protocols.ladder.tables:import_table"]
    assert f"2 sessions of 1 models, {len(IMPORT_ESTIMATORS)} (model, estimator) rows" in capsys.readouterr().out
    md = (tmp_path / "out" / "import_aggregates.md").read_text()
    assert md.startswith("### LADDER sessions: aggregates per model and baseline\n")
    assert f"Recomputed from the sessions in {tmp_path / 's.csv'} (estimators" in " ".join(md.split())
    per = pd.read_csv(tmp_path / "out" / "sessions.csv", dtype={"session_id": str})
    written = pd.read_csv(tmp_path / "out" / "import_aggregates.csv")
    pd.testing.assert_frame_equal(written, authors_aggregates(per), check_dtype=False)
