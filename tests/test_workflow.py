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
