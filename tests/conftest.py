import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A stray hub download must fail fast: the machines have no hub access.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
#: lines of a failed session run's output shown with its cause
LOG_TAIL_LINES = 60
#: the tiny run's bound; an idle 2-core machine needs about 7 minutes
TINY_RUN_TIMEOUT_S = 3600


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


def copy_results(results: Path, dest: Path, copy: tuple[str, ...] = ()) -> Path:
    """A copy of a results directory with every file's and directory's mtime kept. Files are
    hard links, which share the file (and its mtime) without copying half a gigabyte of models:
    deleting a name in the copy leaves the original alone, and Snakemake deletes a job's
    outputs and logs before it runs the job. Files under the subdirectories `copy` are real
    copies (what a job may write in place, e.g. benchmark files)."""
    def link_or_copy(src, dst):
        if Path(src).relative_to(results).parts[0] not in copy:
            try:
                os.link(src, dst)
                return dst
            except OSError:
                pass
        return shutil.copy2(src, dst)

    shutil.copytree(results, dest, symlinks=True, copy_function=link_or_copy)
    return dest


# -- session runs that many tests share ----------------------------------------------------------
# A session fixture that raises has pytest repeat its traceback in every dependant. A shared run
# that fails instead skips its dependants with a one-line cause (`SessionRunFailed`); the first
# dependant is turned into an error that shows the cause and the run's log tail
# (pytest_runtest_makereport below), so a failed run still fails the session, once.

_SKIP_PREFIX = "skipped because the {what} failed: "
_FAILURES = pytest.StashKey[dict]()


class SessionRunFailed(pytest.skip.Exception):
    """The skip of a dependant of a failed session run; `detail` is shown once."""

    def __init__(self, what: str, cause: str, detail: str):
        super().__init__(_SKIP_PREFIX.format(what=what) + cause)
        self.what, self.detail = what, detail


def failure_cause(output: str) -> str:
    """One line naming why a Snakemake run failed: the failed rule and the last line of its
    log, else the last error line of Snakemake's output."""
    rule = re.search(r"^Error in rule (\S+):", output, re.M)
    if rule:
        wildcards = re.search(r"^\s+wildcards: (.*)$", output[rule.end():], re.M)
        log = re.search(r"^\s+log: (\S+)", output[rule.end():], re.M)
        last = ""
        if log and Path(log.group(1)).is_file():
            lines = [x for x in Path(log.group(1)).read_text(errors="replace").splitlines() if x.strip()]
            last = lines[-1].strip() if lines else ""
        where = f"rule {rule.group(1)}" + (f" ({wildcards.group(1)})" if wildcards else "")
        return where + (f": {last}" if last else "")
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    errors = [x for x in lines if re.search(r"error|exception", x, re.I)]
    return (errors or lines or ["no output"])[-1]


def log_tail(output: str, n: int = LOG_TAIL_LINES) -> str:
    return "\n".join(output.splitlines()[-n:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    exc = call.excinfo.value if call.excinfo is not None else None
    if call.when != "setup" or not isinstance(exc, SessionRunFailed):
        return
    reported = item.config.stash.setdefault(_FAILURES, {})
    if exc.what not in reported:
        reported[exc.what] = item.nodeid
        report.outcome = "failed"
        report.longrepr = f"the {exc.what} failed: {exc.msg.split(': ', 1)[1]}\n\n{exc.detail}"
    elif isinstance(report.longrepr, tuple):
        # the reason alone, not prefixed by the exception's class
        report.longrepr = (*report.longrepr[:2], exc.msg)


def _build_tiny(results: Path) -> Path:
    # umask 002: what a shared group directory on a cluster gives; every file must stay readable
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # the target first: --configfile and --config each take every value that follows them
    cmd = [sys.executable, "-m", "snakemake", "all_tables", "--profile", "profiles/local",
           "--configfile", "config/test.yaml", "--config", f"results={results}"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, umask=0o002,
                              timeout=TINY_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(errors="replace")
        raise SessionRunFailed("tiny run", f"not finished after {TINY_RUN_TIMEOUT_S} s", log_tail(out)) from None
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        raise SessionRunFailed("tiny run", failure_cause(out), f"$ {' '.join(cmd)}\n{log_tail(out)}")
    return results


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The results directory of one local run of the whole DAG on config/test.yaml (under umask
    002), shared by every test that checks the workflow's outputs (the workflow, report,
    incremental and SLURM tests). Tests only read it (a test that changes files works on a
    copy). $SELFKNOW_TINY_RESULTS names a results directory to reuse: the run then only
    brings it up to date."""
    reuse = os.environ.get("SELFKNOW_TINY_RESULTS")
    results = Path(reuse).resolve() if reuse else tmp_path_factory.mktemp("tiny") / "results"
    return _build_tiny(results)
