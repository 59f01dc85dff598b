"""`selfknow persistent-eval` on plain records and `selfknow export-records`: the reader's checks
name the file, row and column of a bad record before anything is written; the command's numbers
are the workflow's (the same `evaluate` on the same records gives the same Table 1)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfknow.cli import main
from selfknow.protocols.persistent import tables as T
from selfknow.protocols.persistent.catalog import fitted_methods
from selfknow.protocols.persistent.evaluate import (Confidences, evaluate, record_arrays,
                                                    records_frame)
from selfknow.protocols.persistent.inputs import EvalFiles, Evaluation
from selfknow.protocols.persistent.own_records import export_records
from selfknow.readers import read_records
from selfknow.readers.plain import write_plain

from conftest import REPO

EXAMPLE = REPO / "examples" / "persistent_records.csv"
TABLE1_METHODS = ["end_correct", "sc", "nonoracle", "oracle"]


def _confidences(seed: int, n: int = 120, ckpts=("A", "B", "C")) -> Confidences:
    """Later checkpoints know more; sc tracks correctness, nonoracle is noise (two seeds)."""
    rng = np.random.default_rng(seed)
    y = (rng.random((len(ckpts), n)) < np.linspace(0.3, 0.7, len(ckpts))[:, None]).astype(float)
    good = np.clip(0.3 * y + 0.7 * rng.random(y.shape), 0, 1)
    return Confidences(np.array([f"q{i:03d}" for i in range(n)]), list(ckpts), y, {
        "end_correct": np.repeat(np.linspace(0, 1, len(ckpts))[:, None], n, axis=1)[None],
        "sc": good[None], "nonoracle": rng.random((2, len(ckpts), n)),
        "oracle": np.clip(good + 0.1 * rng.random(y.shape), 0, 1)[None]})


# ----------------------------------------------------------------------------------------------
# reading and checking
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_plain_records_round_trip_exactly_in_every_format(tmp_path, suffix):
    conf = _confidences(1, n=20)
    df = records_frame(conf, dataset="d")
    write_plain(df, tmp_path / f"r{suffix}")
    back = read_records(tmp_path / f"r{suffix}")
    assert list(back.columns) == ["item", "checkpoint", "method", "correct", "confidence", "role", "dataset", "seed"]
    np.testing.assert_array_equal(back["confidence"].to_numpy(), df["confidence"].to_numpy())  # bit for bit
    (arrays,) = record_arrays(back).values()
    assert arrays.checkpoints == conf.checkpoints and list(arrays.items) == list(conf.items)
    np.testing.assert_array_equal(arrays.correct, conf.correct)
    for m, c in conf.methods.items():
        np.testing.assert_array_equal(arrays.methods[m], c)


def test_record_arrays_orders_checkpoints_by_appearance_items_by_id_and_stacks_seeds(tmp_path):
    rows = [("q2", "late", "m", 1, 0.9, 0), ("q1", "late", "m", 0, 0.2, 0), ("q1", "early", "m", 0, 0.3, 0),
            ("q2", "early", "m", 0, 0.4, 0), ("q2", "late", "m", 1, 0.8, 1), ("q1", "late", "m", 0, 0.1, 1),
            ("q1", "early", "m", 0, 0.5, 1), ("q2", "early", "m", 0, 0.6, 1), ("q1", "train0", "m", 1, 0.5, 0)]
    raw = pd.DataFrame(rows, columns=["item", "checkpoint", "method", "correct", "confidence", "seed"])
    raw["role"] = ["eval"] * 8 + ["train"]
    raw.to_parquet(tmp_path / "t.parquet")
    (conf,) = record_arrays(read_records(tmp_path / "t.parquet")).values()
    assert conf.checkpoints == ["late", "early"] and list(conf.items) == ["q1", "q2"]
    np.testing.assert_array_equal(conf.correct, [[0, 1], [0, 0]])
    np.testing.assert_array_equal(conf.methods["m"], [[[0.2, 0.9], [0.3, 0.4]], [[0.1, 0.8], [0.5, 0.6]]])


GOOD = "item,checkpoint,method,correct,confidence\n" + "".join(
    f"q{i},{c},m,{int((i + k) % 2)},0.{i + 2}\n" for k, c in enumerate(["c1", "c2"]) for i in range(3))

BAD = {
    "missing column": (GOOD.replace(",confidence\n", ",conf\n", 1), "missing column(s) ['confidence']"),
    "non-numeric confidence": (GOOD.replace("q1,c2,m,0,0.3", "q1,c2,m,0,high"),
                               "line 6, column 'confidence': expected a number, got 'high'"),
    "confidence outside [0, 1]": (GOOD.replace("q1,c2,m,0,0.3", "q1,c2,m,0,1.3"),
                                  "line 6, column 'confidence': 1.3 is not a probability in [0, 1]"),
    "correct not 0/1": (GOOD.replace("q2,c1,m,0,0.4", "q2,c1,m,yes,0.4"), "line 4, column 'correct': expected 0/1 or true/false, got 'yes'"),
    "empty item": (GOOD.replace("q2,c1,m", ",c1,m"), "line 4, column 'item': missing or empty"),
    "duplicate row": (GOOD + "q0,c1,m,0,0.5\n", "line 8 repeats line 2: two rows for one (item, checkpoint, method)"),
    "checkpoint with one question": (GOOD + "q0,c3,m,1,0.5\n",
                                     "line 8, column 'checkpoint': checkpoint 'c3' has one question ('q0')"),
    "correctness differs between methods": (GOOD + "".join(f"q{i},c1,n,{int(i != 1)},0.5\n" for i in range(3)),
                                            "line 8, column 'correct': 1 where line 2 (method 'm') has 0 for item 'q0'"),
    "a method lacks an answer": (GOOD + "".join(f"q{i},c1,n,{int(i % 2)},0.5\n" for i in range(3)),
                                 "method 'n' has no row for item 'q0' at checkpoint 'c2'"),
    "a checkpoint lacks a question": (GOOD.replace("q2,c2,m,1,0.4\n", ""),
                                      "no row for item 'q2' at checkpoint 'c2', which line 4 has"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_records_stop_with_file_row_and_column_before_any_output(tmp_path, capsys, case):
    text, message = BAD[case]
    path = tmp_path / "records.csv"
    path.write_text(text)
    out = tmp_path / "out"
    assert main(["persistent-eval", str(path), str(out), "--min-contrast", "1", "--bootstrap", "5"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and message in err, err
    assert not out.exists()


def test_the_good_records_of_the_malformed_cases_evaluate(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text(GOOD)
    assert main(["persistent-eval", str(path), str(tmp_path / "out"), "--min-contrast", "1", "--bootstrap", "5",
                 "--quiet"]) == 0
    # q0 and q2 flip between c1 and c2, q1 too: a contrast set of all three questions
    sizes = pd.read_csv(tmp_path / "out" / "contrast_sets.csv")
    assert sizes["size"].tolist() == [3, 3]


@pytest.mark.parametrize("suffix,where", [(".jsonl", "line 3"), (".parquet", "row 2")])
def test_jsonl_and_parquet_name_the_row_of_a_bad_confidence(tmp_path, suffix, where):
    df = pd.DataFrame({"item": ["a", "b", "c"], "checkpoint": "k", "method": "m", "correct": [0, 1, 1],
                       "confidence": [0.5, -0.1, 0.5]})
    path = tmp_path / f"r{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n" + df.to_json(orient="records", lines=True))  # a blank first line counts
    else:
        df.to_parquet(path)
    with pytest.raises(ValueError, match=f"{path}: {where}, column 'confidence': -0.1 is not a probability"):
        read_records(path)


@pytest.mark.parametrize("text,message", [
    (GOOD.replace("q1,c1", "\nq1,c1").replace("q2,c1,m,0,0.4", "q2,c1,m,0,x"),
     "line 5, column 'confidence': expected a number, got 'x'"),  # a blank line is skipped, not renumbered
    (GOOD.replace("confidence\n", "confidence,role\n").replace("\n", ",eval\n").replace(
        "role,eval\n", "role\n").replace("q2,c1,m,0,0.4,eval", "q2,c1,m,0,0.4,test"),
     "line 4, column 'role': 'test' is not one of eval, train"),
    (GOOD.replace("confidence\n", "confidence,seed\n").replace("\n", ",0\n").replace(
        "seed,0\n", "seed\n").replace("q2,c1,m,0,0.4,0", "q2,c1,m,0,0.4,inf"),
     "line 4, column 'seed': expected an integer, got 'inf'"),
])
def test_plain_roles_seeds_and_blank_lines(tmp_path, text, message):
    path = tmp_path / "records.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        read_records(path)


# ----------------------------------------------------------------------------------------------
# the command's numbers are the workflow's
# ----------------------------------------------------------------------------------------------
def _workflow_metric_files(root: Path, confs: dict[str, Confidences], settings: dict) -> dict:
    """What the workflow's metrics job writes for model "M" on each dataset (its tail: records,
    `evaluate` with the workflow's fitted-normalisation methods), as `table_job` reads it."""
    files = {}
    for d, conf in confs.items():
        (conf2,) = record_arrays(records_frame(conf)).values()
        res = evaluate(conf2, bt_methods=fitted_methods(), **settings)
        p = T.metrics_paths(str(root), "M", d, "main")
        Path(p["contrast"]).parent.mkdir(parents=True, exist_ok=True)
        Path(p["metrics"]).parent.mkdir(parents=True, exist_ok=True)
        res.points.to_parquet(p["metrics"])
        res.contrast.to_parquet(p["contrast"])
        np.savez_compressed(p["replicates"], **res.replicates)
        judge = root / f"judge_{d}.csv"
        pd.DataFrame([{"judge": "exact match", "questions": 1, "refused": 0, "unparsable": 0, "no candidates": 0,
                       "candidates": 1, "R": 1, "W": 0, "N": 0, "unlabelled": 0}]).to_csv(judge, index=False)
        files[Evaluation("M", d, "main")] = EvalFiles(p["metrics"], p["replicates"], p["contrast"], str(judge))
    return files


def test_persistent_eval_writes_the_workflows_table1_from_its_records(tmp_path):
    """Two datasets of synthetic confidences: the workflow's Table 1 (`table_job` on the metric
    files its metrics job writes) and `persistent-eval` on the same records exported to CSV agree
    cell for cell, bold and underline included."""
    settings = {"min_contrast": 20, "n_boot": 100, "n_boot_ece": 0, "seed": 17}
    confs = {"d1": _confidences(2), "d2": _confidences(3)}
    files = _workflow_metric_files(tmp_path / "wf", confs, settings)
    T.table_job("table1", files, ["M"], ["d1", "d2"], "t", str(tmp_path / "wf" / "table1.csv"),
                str(tmp_path / "wf" / "table1.md"), min_contrast=20, min_contrast_transfer=20)
    records = pd.concat([records_frame(c, dataset=d) for d, c in confs.items()], ignore_index=True)
    write_plain(records, tmp_path / "records.csv")
    out = tmp_path / "own"
    assert main(["persistent-eval", str(tmp_path / "records.csv"), str(out), "--min-contrast", "20", "--bootstrap",
                 "100", "--bootstrap-ece", "0", "--seed", "17", "--label", "M", "--quiet"]) == 0
    assert (out / "table1.csv").read_bytes() == (tmp_path / "wf" / "table1.csv").read_bytes()

    def cells(md: Path) -> list[str]:
        return [line for line in md.read_text().splitlines() if line.startswith("|")]

    own, wf = cells(out / "table1.md"), cells(tmp_path / "wf" / "table1.md")
    assert own == wf and any("**" in line for line in own)
    values = pd.read_csv(out / "table1.csv")
    assert values.notna().all().all() and values["M full AUC"].between(0.4, 0.99).all()
    for name in ("table8", "table11", "table12"):
        assert (out / f"{name}.tex").is_file()
    assert (out / "reliability_d1.png").stat().st_size > 0 and (out / "reliability_d2.png").stat().st_size > 0


def test_the_committed_example_evaluates(tmp_path, capsys):
    """docs/own-results.md's worked example, with fewer replicates."""
    out = tmp_path / "out"
    assert main(["persistent-eval", str(EXAMPLE), str(out), "--min-contrast", "10", "--bootstrap", "50"]) == 0
    err = capsys.readouterr().err
    assert "3 evaluation checkpoints x 60 questions, 3 methods" in err
    t1 = pd.read_csv(out / "table1.csv").set_index("method")
    # the example's probe sees the answer's correctness, verbalized confidence is noise
    assert t1.loc["probe", "full AUC"] > t1.loc["self_consistency", "full AUC"] > t1.loc["verbalized", "full AUC"]


def test_export_records_on_the_tiny_run_reproduces_its_persistent_table1(tiny_run, tmp_path):
    """The acceptance test of issue #28: the workflow's own records of the tiny config, exported
    to the plain format, give its persistent Table 1 byte for byte, and every metric of every
    method of its metrics files."""
    model = "wm-small"
    exported = tmp_path / "records.csv"
    assert main(["export-records", str(tiny_run), str(exported), "--methods", ",".join(TABLE1_METHODS)]) == 0
    out = tmp_path / "own"
    assert main(["persistent-eval", str(exported), str(out), "--config", str(REPO / "config" / "test.yaml"),
                 "--label", model, "--quiet"]) == 0
    wf = tiny_run / "tables" / "persistent"
    assert (out / "table1.csv").read_bytes() == (wf / "table1.csv").read_bytes()
    rows = [line for line in (wf / "table1.md").read_text().splitlines() if line.startswith("|")]
    assert [line for line in (out / "table1.md").read_text().splitlines() if line.startswith("|")] == rows
    # all methods: metrics.csv equals the workflow's metric files, value for value
    records = export_records(tiny_run)
    write_plain(records, tmp_path / "all.parquet")
    assert main(["persistent-eval", str(tmp_path / "all.parquet"), str(tmp_path / "all"), "--config",
                 str(REPO / "config" / "test.yaml"), "--quiet"]) == 0
    mine = pd.read_csv(tmp_path / "all" / "metrics.csv", float_precision="round_trip")
    for d in records["dataset"].unique():
        theirs = pd.read_parquet(tiny_run / "persistent" / "metrics" / model / d / "main.parquet")
        ours = mine[(mine["dataset"] == d) & ((mine["normaliser"] == "eq1") | mine["method"].isin(fitted_methods()))]
        key = ["normaliser", "method", "metric"]
        merged = theirs.merge(ours, on=key, suffixes=("_wf", "_own"), how="outer", indicator=True)
        assert (merged["_merge"] == "both").all()
        np.testing.assert_array_equal(merged["value_wf"].to_numpy(), merged["value_own"].to_numpy())


def test_export_records_names_what_it_cannot_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="no persistent records"):
        export_records(tmp_path)
    for model, d in (("M1", "a"), ("M1", "b"), ("M2", "a")):
        p = tmp_path / "persistent" / "records" / model / d / "main.parquet"
        p.parent.mkdir(parents=True)
        records_frame(_confidences(4, n=10)).to_parquet(p)
    with pytest.raises(ValueError, match=r"several models \(M1, M2\); name one"):
        export_records(tmp_path)
    with pytest.raises(ValueError, match="no method 'gcm' \\(have end_correct, sc, nonoracle, oracle\\)"):
        export_records(tmp_path, model="M1", methods=["sc", "gcm"])
    df = export_records(tmp_path, model="M1", methods=["oracle", "sc"])
    assert df["dataset"].unique().tolist() == ["a", "b"]
    assert df["method"].unique().tolist() == ["oracle", "sc"] and len(df) == 2 * 2 * 3 * 10
