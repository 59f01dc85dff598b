"""The workflow itself: dry-runs of every shipped config, lint, and a real end-to-end run of the
tiny config with real small models (its tables are checked for content, not just existence)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(*args, cwd=REPO, check=True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


@pytest.mark.parametrize("configfile", ["config.yaml", "config/test.yaml", "config/paper.yaml"])
def test_dry_run(configfile, tmp_path):
    out = snakemake("all_tables", "-n", "--configfile", configfile, "--config", f"results={tmp_path}/results")
    assert "all_tables" in out.stdout


def test_lint_reports_nothing():
    proc = snakemake("--lint", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_bad_config_stops_with_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "config" / "test.yaml").read_text().replace("backend: hf", "backend: hff", 1))
    proc = snakemake("-n", "--configfile", str(bad), check=False)
    assert proc.returncode != 0
    assert "models[0].backend" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_tiny_run_builds_every_table(tiny_run):
    """Every table the papers' catalogs list for the tiny config is written and non-empty,
    and nothing else under their tables/; each persistent method table has exactly the
    columns and the rows (in order) its catalog entry implies."""
    from test_catalog import catalog_targets, expected_method_table

    from selfknow.config import load_config
    from selfknow.protocols.persistent.catalog import TABLE, MethodTable

    cfg = load_config(REPO / "config" / "test.yaml")
    tables = sorted((tiny_run / "tables").rglob("*.csv"))
    assert tables, "no tables were written"
    for t in tables:
        df = pd.read_csv(t)
        assert len(df) > 0, f"{t} is empty"
        assert (t.with_suffix(".md")).exists()
    papers = {t.relative_to(tiny_run).as_posix() for t in tables if t.parent.name in ("persistent", "ladder", "lcae")}
    assert papers == {f for f in catalog_targets(cfg) if f.endswith(".csv")}
    checked = 0
    for name, entry in TABLE.items():
        path = tiny_run / "tables" / "persistent" / f"{name}.csv"
        if isinstance(entry.layout, MethodTable) and path.exists():
            df = pd.read_csv(path)
            columns, labels = expected_method_table(name, cfg)
            assert list(df.columns) == columns, name
            assert df["method"].tolist() == labels, name
            checked += 1
    assert checked == sum(isinstance(e.layout, MethodTable) for e in TABLE.values())  # the tiny config has them all


@pytest.mark.slow
def test_tiny_rerun_runs_nothing(tiny_run):
    proc = snakemake("all_tables", "-n", "--configfile", "config/test.yaml", "--config", f"results={tiny_run}")
    assert "Nothing to be done" in proc.stdout + proc.stderr


_FAILING_SESSION_RUN = '''
import pytest
from conftest import SessionRunFailed

@pytest.fixture(scope="session")
def tiny_run():
    raise SessionRunFailed("tiny run", "rule world_train (family=wm-small): boom",
                           "first line of the log tail\\nlast line of the log tail")

@pytest.mark.parametrize("k", range(4))
def test_dependant(tiny_run, k):
    pass

def test_independent():
    pass
'''


def test_a_failed_session_run_is_one_error_and_its_dependants_skip_with_the_cause(tmp_path):
    """A failed shared run errors once, with its cause and log tail; its other dependants skip
    naming the cause; the session fails (CI never goes green by skipping)."""
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('repo_conftest', {str(REPO / 'tests' / 'conftest.py')!r})\n"
        "repo = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(repo)\n"
        "SessionRunFailed, pytest_runtest_makereport = repo.SessionRunFailed, repo.pytest_runtest_makereport\n")
    (tmp_path / "test_x.py").write_text(_FAILING_SESSION_RUN)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "-q",
                           "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / "test_x.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 passed, 3 skipped, 1 error" in out, out
    assert out.count("last line of the log tail") == 1, out
    assert out.count("\nthe tiny run failed: rule world_train (family=wm-small): boom\n") == 1, out
    assert "test_x.py:10: skipped because the tiny run failed: rule world_train (family=wm-small): boom" in out, out


def test_failure_cause_names_the_failed_rule_and_its_log(tmp_path):
    from conftest import failure_cause

    log = tmp_path / "world_train.log"
    log.write_text("loading\nValueError: seq_len 192 exceeds the corpus\n\n")
    output = (f"Select jobs to execute...\nError in rule world_train:\n    message: None\n    jobid: 4\n"
              f"    output: results/world/models/wm-small\n    log: {log} (check log file(s) for error details)\n"
              f"    wildcards: family=wm-small\nShutting down, this might take some time.\n")
    assert failure_cause(output) == "rule world_train (family=wm-small): ValueError: seq_len 192 exceeds the corpus"
    assert failure_cause("Building DAG of jobs...\nMissingInputException: no rule makes x\n") == \
        "MissingInputException: no rule makes x"
