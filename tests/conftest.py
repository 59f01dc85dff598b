import os
import subprocess
import sys
from pathlib import Path

import pytest

# A stray hub download must fail fast: the machines have no hub access.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, which CI has and a newcomer's clone does not: skip cleanly without it."""
    d = SHARED / "data"
    if not d.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return d


def run_snakemake(*args: str, cwd: Path = REPO, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`snakemake ARGS` with the hub offline; raises with the tail of its output on failure."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The results directory of one local run of the whole DAG on config/test.yaml, shared by
    every test that checks the workflow's outputs (the workflow, report and SLURM tests)."""
    results = tmp_path_factory.mktemp("tiny") / "results"
    # the target first: --configfile and --config each take every value that follows them
    old = os.umask(0o002)  # a group-shared results directory, as on a cluster
    try:
        run_snakemake("all_tables", "--profile", "profiles/local", "--configfile", "config/test.yaml",
                      "--config", f"results={results}")
    finally:
        os.umask(old)
    return results
