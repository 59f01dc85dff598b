import os
import re
import shutil
import signal
import subprocess
import sys
import time
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
#: the background tiny run's niceness: the tests in the foreground keep their CPU
TINY_RUN_NICE = 10


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


# -- the tiny run, built in the background -------------------------------------------------------
# Most tests run in one pytest process on one core; the tiny run's jobs use what is left. So the
# run starts, niced, as soon as the session knows a test needs it (pytest_runtestloop), and the
# modules that read it run after every other module (pytest_collection_modifyitems): by then it
# is usually built, and its minutes are off the suite's wall time.
_TINY = pytest.StashKey["TinyRun"]()
_SIGTERM = pytest.StashKey[object]()


class TinyRun:
    """One local `all_tables` run of config/test.yaml into `results`, under umask 002 (what a
    shared group directory on a cluster gives: every file must stay readable), started in its
    own process group at construction, its output in `log`; `result()` waits for it."""

    def __init__(self, results: Path, log: Path):
        self.results, self.log = results, log
        # the target first: --configfile and --config each take every value that follows them
        self.cmd = [sys.executable, "-m", "snakemake", "all_tables", "--profile", "profiles/local",
                    "--configfile", "config/test.yaml", "--config", f"results={results}"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.started = time.monotonic()
        self.seconds: float | None = None  # from start to end, once ended
        self.waited = 0.0  # how long tests waited for it
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["nice", "-n", str(TINY_RUN_NICE), *self.cmd], cwd=REPO, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, umask=0o002,
                                         start_new_session=True)

    def result(self) -> Path:
        """The results directory once the run succeeded; SessionRunFailed naming why it did not."""
        t0 = time.monotonic()
        try:
            returncode = self.proc.wait(timeout=max(0.0, self.started + TINY_RUN_TIMEOUT_S - t0))
        except subprocess.TimeoutExpired:
            self.stop()
            raise SessionRunFailed("tiny run", f"not finished after {TINY_RUN_TIMEOUT_S} s",
                                   log_tail(self.output())) from None
        finally:
            self.waited += time.monotonic() - t0
        if self.seconds is None:
            self.seconds = time.monotonic() - self.started
        if returncode != 0:
            out = self.output()
            raise SessionRunFailed("tiny run", failure_cause(out), f"$ {' '.join(self.cmd)}\n{log_tail(out)}")
        return self.results

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Stop Snakemake and every job it started, if still running."""
        if self.proc.poll() is None:
            from selfknow.rehearsal.harness import stop_group  # pandas and more: only when needed

            stop_group(self.proc, signal.SIGTERM)


def _needs_tiny(item: pytest.Item) -> bool:
    return "tiny_run" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The modules that read the tiny run after all others, each module's tests kept together
    and in order (module fixtures, such as the SLURM cluster, are set up once)."""
    late = {item.module for item in items if _needs_tiny(item) and getattr(item, "module", None)}
    items.sort(key=lambda item: getattr(item, "module", None) in late)


def _start_tiny(config: pytest.Config) -> TinyRun:
    reuse = os.environ.get("SELFKNOW_TINY_RESULTS")
    tmp = config._tmp_path_factory.mktemp("tiny")
    results = Path(reuse).resolve() if reuse else tmp / "results"
    build = config.stash[_TINY] = TinyRun(results, tmp / "snakemake.log")
    previous = config.stash[_SIGTERM] = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        # what `timeout` sends: the run is in its own process group, so stop it first
        build.stop()
        signal.signal(signum, previous if callable(previous) else signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    return build


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    if not session.config.option.collectonly and any(_needs_tiny(item) for item in session.items):
        _start_tiny(session.config)


def pytest_sessionfinish(session):
    build = session.config.stash.get(_TINY, None)
    if build is not None:
        build.stop()  # a session cut short (-x, Ctrl-C) leaves no run behind
        signal.signal(signal.SIGTERM, session.config.stash[_SIGTERM])


def pytest_terminal_summary(terminalreporter, config):
    build = config.stash.get(_TINY, None)
    if build is not None and build.seconds is not None:
        terminalreporter.write_line(f"tiny run: {build.seconds:.0f} s in the background, "
                                    f"{build.waited:.0f} s of it waited for by tests ({build.log})")


@pytest.fixture(scope="session")
def tiny_run(request) -> Path:
    """The results directory of one local run of the whole DAG on config/test.yaml (under umask
    002), shared by every test that checks the workflow's outputs (the workflow, report,
    incremental and SLURM tests). Tests only read it (a test that changes files works on a
    copy). $SELFKNOW_TINY_RESULTS names a results directory to reuse: the run then only
    brings it up to date."""
    build = request.config.stash.get(_TINY, None) or _start_tiny(request.config)
    return build.result()
