"""Comparing two results directories' tables (benchmarks/compare_tables.py), on hand-made cases."""
import math
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO
from selfknow.report.compare import compare_frames, compare_results

TOL = {"rtol": 1e-9, "atol": 1e-12}


def test_rounding_is_equal_and_measured():
    before = pd.DataFrame({"method": ["sc", "oracle"], "auc": [0.75, 0.5], "ece": [0.0, float("nan")],
                           "band": [None, "severe"]})
    after = before.assign(auc=[0.75 + 2 ** -52, 0.5], ece=[1e-13, float("nan")])
    problems, max_abs, max_rel = compare_frames(before, after, **TOL)
    assert problems == []
    # 2^-52 on 0.75 is the largest absolute difference except for 1e-13 on 0; relative: 1e-13/1e-13 = 1
    assert max_abs == pytest.approx(1e-13)
    assert max_rel == 1.0


def test_a_number_beyond_the_tolerance_names_its_row():
    before = pd.DataFrame({"method": ["sc", "oracle"], "auc": [0.75, 0.5]})
    after = before.assign(auc=[0.75, 0.5 + 1e-6])
    problems, max_abs, max_rel = compare_frames(before, after, **TOL)
    assert problems == ["column auc: 1 cells beyond the tolerance, first row 1 (oracle): 0.5 -> 0.500001"]
    assert max_abs == pytest.approx(1e-6)
    assert max_rel == pytest.approx(1e-6 / (0.5 + 1e-6))


def test_nan_against_a_number_text_columns_and_shapes():
    before = pd.DataFrame({"m": ["a", "b"], "x": [1.0, float("nan")], "gone": [1, 2]})
    after = pd.DataFrame({"m": ["a", "c"], "x": [1.0, 0.0], "new": [1, 2]})
    problems, _, _ = compare_frames(before, after, **TOL)
    assert problems == ["columns only before: gone", "columns only after: new",
                        "column m: 1 cells differ, first row 1 (b): 'b' -> 'c'",
                        "column x: 1 cells beyond the tolerance, first row 1 (b): nan -> 0.0"]
    problems, max_abs, _ = compare_frames(before, after.iloc[:1], **TOL)
    assert problems[-1] == "rows: 2 before, 1 after" and math.isnan(max_abs)


def _results(root, tables):
    for name, df in tables.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(root / name, index=False)
    return root


def test_directories_and_the_script_exit_code(tmp_path):
    t = pd.DataFrame({"m": ["a"], "v": [0.25]})
    before = _results(tmp_path / "b", {"tables/p/t1.csv": t, "tables/p/old.csv": t})
    after = _results(tmp_path / "a", {"tables/p/t1.csv": t, "tables/p/new.csv": t, "figures/p/f.csv": t})
    diffs, only_before, only_after = compare_results(before, after, **TOL)
    assert [(d.name, d.equal) for d in diffs] == [("tables/p/t1.csv", True)]
    assert (only_before, only_after) == (["tables/p/old.csv"], ["figures/p/f.csv", "tables/p/new.csv"])

    script = [sys.executable, str(REPO / "benchmarks" / "compare_tables.py"), str(before), str(after)]
    assert subprocess.run(script, capture_output=True).returncode == 0
    t.assign(v=0.26).to_csv(after / "tables/p/t1.csv", index=False)
    proc = subprocess.run(script, capture_output=True, text=True)
    assert proc.returncode == 1 and "DIFFER  tables/p/t1.csv" in proc.stdout
    assert subprocess.run([*script, "--rtol", "0.1"], capture_output=True).returncode == 0


def test_a_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        compare_results(tmp_path / "nope", tmp_path, **TOL)
