"""The SLURM profile, run for real on a single-node cluster on this machine.

The session fixture starts the cluster with scripts/slurm_local.sh (installing Debian's
slurm-wlm and munge when missing) and stops it at the end. Two workflows go through
`snakemake --profile profiles/slurm`:

- a throwaway 3-rule workflow, written to a temporary folder: checks that every job went
  through sbatch (job ids in Snakemake's output, in squeue and `scontrol show job`, and in the
  job's own environment), that the requested CPUs/memory/time reached SLURM, that no GPU was
  asked for when the rule's `gpu` is 0, and that the outputs equal a local run's;
- the project's tiny config (config/test.yaml), on a copy of the session's local tiny run: the
  jobs that make a few of its outputs (`FORCE`) and every job downstream of them go through
  sbatch, answer every model call from the local run's model-call cache, and give the local
  run's tables and outputs. SELFKNOW_SLURM_FULL=1 runs the whole DAG through
  SLURM instead (about 11 minutes on an idle machine, against 2-3).

One local cluster runs at a time (it owns /etc/slurm/slurm.conf and its ports): two test
sessions on one machine take turns through a file lock. Without root or apt-get the cluster cannot be made and these tests skip, except in CI
(CI=true), where that is an error.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
import yaml
from filelock import FileLock, Timeout

from conftest import SessionRunFailed, copy_results, failure_cause, log_tail
from test_incremental import dry_run, parse_dry_run

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm_local.sh"
PROFILE = REPO / "profiles" / "slurm"
TINY_CONFIG = REPO / "config" / "test.yaml"
IN_CI = os.environ.get("CI", "").lower() == "true"
#: held while a test session uses the local cluster: one cluster per machine
CLUSTER_LOCK = Path(tempfile.gettempdir()) / "selfknow-slurm-cluster.lock"
#: how long a session waits for another one's cluster tests (theirs take minutes)
CLUSTER_LOCK_TIMEOUT_S = 3600

# "Job 3 has been submitted with SLURM jobid 17 (log: ...)." (plugin 2.x, run_job)
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")


def _cannot_run_slurm() -> str | None:
    """Why this machine cannot host the local cluster, or None if it can."""
    if os.geteuid() != 0:
        return "the local SLURM cluster needs root (apt-get install, slurmd)"
    installed = all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "munged"))
    if not installed and not shutil.which("apt-get"):
        return "SLURM is not installed and apt-get is not available"
    return None


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Cluster:
    """A running local cluster: the environment that reaches it, and its state dir."""

    state: Path
    env: dict[str, str]
    start_seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def show_job(self, jobid: str) -> dict[str, str]:
        """`scontrol show job -o`, parsed into its Key=Value fields; once slurmctld has purged a
        finished job (MinJobAge), its line in the cluster's job-completion log instead."""
        proc = self.run("scontrol", "show", "job", "-o", jobid, check=False)
        if proc.returncode == 0:
            return _key_values(proc.stdout)
        for line in (self.state / "log" / "jobcomp.log").read_text().splitlines():
            if line.startswith(f"JobId={jobid} "):
                return _key_values(line)
        raise AssertionError(f"SLURM job {jobid} is neither known to scontrol ({proc.stderr.strip()}) "
                             f"nor in {self.state / 'log' / 'jobcomp.log'}")


def _key_values(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+(?::\w+)?)=(\S*)", line))


@pytest.fixture(scope="module")
def work_dir():
    """Scratch space outside pytest's basetemp: concurrent pytest sessions of the same user
    prune each other's old basetemp dirs, which would pull the cluster's spool from under it."""
    d = Path(tempfile.mkdtemp(prefix="selfknow-slurm-test-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[Cluster]:
    """The local cluster of scripts/slurm_local.sh (its default state dir, or $SLURM_LOCAL_DIR).

    Only one local cluster can run at a time (it owns /etc/slurm/slurm.conf, which srun inside
    a job reads, and its ports), so a test session holds CLUSTER_LOCK from start to stop and
    another session waits for it; a cluster the user already started is used as it is and left
    running; otherwise the fixture starts one and stops it after this module's tests, checking
    that no daemon is left.
    """
    reason = _cannot_run_slurm()
    if reason:
        if IN_CI:
            raise SessionRunFailed("local SLURM cluster", f"CI must run the SLURM tests, but {reason}", "")
        pytest.skip(reason)
    lock = FileLock(CLUSTER_LOCK, timeout=CLUSTER_LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout:
        pytest.fail(f"another test session has held the local SLURM cluster ({CLUSTER_LOCK}) for over "
                    f"{CLUSTER_LOCK_TIMEOUT_S} s")
    try:
        yield from _cluster()
    finally:
        lock.release()


def _cluster() -> Iterator[Cluster]:
    """Start the cluster unless it runs, yield it, stop it if this started it."""
    state = Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/selfknow-slurm"))
    env = dict(os.environ, SLURM_LOCAL_DIR=str(state), SLURM_CONF=str(state / "slurm.conf"))
    script = ["bash", str(SCRIPT)]
    was_running = subprocess.run([*script, "status"], env=env, capture_output=True, timeout=60).returncode == 0
    t0 = time.monotonic()
    started = subprocess.run([*script, "start"], env=env, capture_output=True, text=True, timeout=900)
    if started.returncode != 0:
        if not was_running:
            subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=120)
        out = started.stdout + started.stderr
        raise SessionRunFailed("local SLURM cluster", failure_cause(out), f"$ scripts/slurm_local.sh start\n{log_tail(out)}")
    cluster = Cluster(state=state, env=env, start_seconds=time.monotonic() - t0)
    daemons = {name: int((state / f"{name}.pid").read_text()) for name in ("munged", "slurmctld", "slurmd")}
    try:
        yield cluster
    finally:
        print(f"\n[slurm] cluster start {cluster.start_seconds:.1f} s" + ("" if not was_running else " (was running)")
              + "".join(f"; {k} {v:.1f} s" for k, v in cluster.timings.items()))
        if not was_running:
            stopped = subprocess.run([*script, "stop"], env=env, capture_output=True, text=True, timeout=120)
            assert stopped.returncode == 0, stopped.stderr
            left = {name: pid for name, pid in daemons.items() if _alive(pid)}
            assert not left, f"daemons still running after stop: {left}"
            assert not Path("/etc/slurm/slurm.conf").is_symlink() or Path("/etc/slurm/slurm.conf").resolve() != (state / "slurm.conf").resolve()


# --- the throwaway workflow ---------------------------------------------------------------

THROWAWAY_SNAKEFILE = '''
import os
from pathlib import Path

SAMPLES = ["a", "b"]


localrules:
    all,


rule all:
    input:
        "out/summary.tsv",


def _where(log):
    """What the job saw of SLURM: proves it ran inside an allocation, not on the host."""
    keys = ("SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_NODE", "SLURM_GPUS")
    Path(log).write_text("".join(f"{k}={os.environ.get(k, '')}\\n" for k in keys))


rule numbers:
    output:
        "out/numbers/{s}.txt",
    log:
        "logs/numbers/{s}.log",
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    run:
        _where(log[0])
        base = sum(map(ord, wildcards.s))
        Path(output[0]).write_text("".join(f"{base * k}\\n" for k in range(1, 6)))


rule square:
    input:
        "out/numbers/{s}.txt",
    output:
        "out/squares/{s}.txt",
    log:
        "logs/square/{s}.log",
    threads: 2
    resources:
        mem_mb=1000,
        runtime=7,
    run:
        _where(log[0])
        values = [int(v) for v in Path(input[0]).read_text().split()]
        Path(output[0]).write_text("".join(f"{v * v}\\n" for v in values))


# The "GPU class" of this workflow: its GPU count comes from the config, 0 here.
rule summarize:
    input:
        expand("out/squares/{s}.txt", s=SAMPLES),
    output:
        "out/summary.tsv",
    log:
        "logs/summarize.log",
    resources:
        mem_mb=800,
        runtime=5,
        gpu=config.get("gpu", 0),
    run:
        _where(log[0])
        rows = [f"{Path(f).stem}\\t{sum(int(v) for v in Path(f).read_text().split())}\\n" for f in input]
        Path(output[0]).write_text("".join(rows))
'''

THROWAWAY_RULES = {"numbers": 2, "square": 2, "summarize": 1}


def _snakemake(*args: str, cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return proc


def _fast_polling() -> list[str]:
    """Profile overrides for seconds-long test jobs: query state 2 s after submission instead
    of 40 s. MinJobAge (600 s) stays above 3 x this, so the plugin keeps using squeue."""
    return ["--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"]


def _parse_time(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")


FAILING_SNAKEFILE = 'rule fail:\n    output: "never.txt"\n    resources: mem_mb=200, runtime=2\n    shell: "exit 3"\n'


@pytest.fixture(scope="module")
def failing_run(slurm_cluster, work_dir):
    """A one-job workflow whose job fails, run through the SLURM profile in the background from
    before the throwaway runs: most of its half minute is the plugin's status checks backing off
    (10 s more after each check that finds no job finished), which the throwaway runs overlap.
    Yields the running `snakemake` and the file its output goes to."""
    d = work_dir / "failing"
    d.mkdir()
    (d / "Snakefile").write_text(FAILING_SNAKEFILE)
    cmd = [sys.executable, "-m", "snakemake", "--profile", str(PROFILE), *_fast_polling()]
    log = d / "output.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=d, env=slurm_cluster.env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def throwaway_runs(slurm_cluster, work_dir, failing_run):
    """The throwaway workflow run twice: locally, and through the SLURM profile (while
    `failing_run` runs beside them)."""
    base = work_dir / "throwaway"
    dirs = {}
    for kind in ("local", "slurm"):
        d = base / kind
        d.mkdir(parents=True)
        (d / "Snakefile").write_text(THROWAWAY_SNAKEFILE)
        dirs[kind] = d
    t0 = time.monotonic()
    _snakemake("--cores", "2", cwd=dirs["local"], env=slurm_cluster.env, timeout=300)
    slurm_cluster.timings["throwaway local run"] = time.monotonic() - t0
    t0 = time.monotonic()
    proc = _snakemake("--profile", str(PROFILE), *_fast_polling(), cwd=dirs["slurm"], env=slurm_cluster.env, timeout=600)
    slurm_cluster.timings["throwaway slurm run"] = time.monotonic() - t0
    return dirs, proc.stdout + proc.stderr


@pytest.mark.slurm
def test_every_job_went_through_sbatch(slurm_cluster, throwaway_runs):
    dirs, log = throwaway_runs
    submitted = SUBMITTED.findall(log)
    assert len(submitted) == sum(THROWAWAY_RULES.values()), log[-4000:]
    jobids = {sid for _, sid in submitted}
    assert len(jobids) == len(submitted), "two Snakemake jobs share a SLURM job id"

    # The job name is the plugin's run id: squeue (which needs no slurmdbd) lists exactly
    # these jobs under it, all finished successfully (MinJobAge keeps them visible).
    run_name = re.search(r"SLURM run ID: (\S+)", log).group(1)
    squeue = slurm_cluster.run("squeue", "--states=all", "--noheader", "--format=%i|%T", "--name", run_name).stdout
    states = dict(line.split("|") for line in squeue.split())
    assert states == {j: "COMPLETED" for j in jobids}

    # Each job's log was written inside that SLURM job.
    seen = {}
    for logfile in (dirs["slurm"] / "logs").rglob("*.log"):
        fields = dict(line.split("=", 1) for line in logfile.read_text().splitlines())
        seen[fields["SLURM_JOB_ID"]] = logfile
    assert set(seen) == jobids

    # The plugin's SLURM log of each job sits under the profile's slurm-logdir.
    slurm_logs = {p.stem for p in (dirs["slurm"] / "results" / "logs" / "slurm").rglob("*.log")}
    assert slurm_logs == jobids


@pytest.mark.slurm
def test_resources_reach_slurm(slurm_cluster, throwaway_runs):
    """threads -> CPUs, mem_mb -> memory, runtime -> time limit; gpu: 0 -> no GPU request."""
    dirs, log = throwaway_runs
    jobs = {}
    for _, sid in SUBMITTED.findall(log):
        info = slurm_cluster.show_job(sid)
        rule = info["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        jobs.setdefault(rule, []).append(info)
    assert {r: len(v) for r, v in jobs.items()} == THROWAWAY_RULES
    expect = {"numbers": ("1", "500M", "00:05:00"), "square": ("2", "1000M", "00:07:00"), "summarize": ("1", "800M", "00:05:00")}
    for rule, infos in jobs.items():
        cpus, mem, limit = expect[rule]
        for info in infos:
            assert info["JobState"] == "COMPLETED", info
            assert info["NumCPUs"] == cpus, (rule, info["NumCPUs"])
            assert info["MinMemoryNode"] == mem, (rule, info["MinMemoryNode"])
            assert info["TimeLimit"] == limit, (rule, info["TimeLimit"])
            assert info["Partition"] == "local"
            assert info.get("TresPerNode", "") in ("", "(null)"), (rule, info.get("TresPerNode"))
            assert "gpu" not in info.get("TRES", ""), (rule, info["TRES"])
    summarize_env = (dirs["slurm"] / "logs" / "summarize.log").read_text()
    assert "SLURM_GPUS=\n" in summarize_env
    assert "SLURM_CPUS_PER_TASK=2\n" in (dirs["slurm"] / "logs" / "square" / "a.log").read_text()

    # Per-job overhead, for the record: queue wait and the job's own wall time (which
    # includes starting Snakemake inside the allocation).
    infos = [i for v in jobs.values() for i in v]
    wait = [(_parse_time(i["StartTime"]) - _parse_time(i["SubmitTime"])).total_seconds() for i in infos]
    wall = [(_parse_time(i["EndTime"]) - _parse_time(i["StartTime"])).total_seconds() for i in infos]
    slurm_cluster.timings["mean queue wait per job"] = sum(wait) / len(wait)
    slurm_cluster.timings["mean job wall time"] = sum(wall) / len(wall)


@pytest.mark.slurm
def test_outputs_equal_local_run(throwaway_runs):
    dirs, _ = throwaway_runs
    local = sorted(p.relative_to(dirs["local"] / "out") for p in (dirs["local"] / "out").rglob("*") if p.is_file())
    remote = sorted(p.relative_to(dirs["slurm"] / "out") for p in (dirs["slurm"] / "out").rglob("*") if p.is_file())
    assert local == remote and len(local) == 5
    match, mismatch, errors = filecmp.cmpfiles(dirs["local"] / "out", dirs["slurm"] / "out", [str(p) for p in local], shallow=False)
    assert not mismatch and not errors
    # The outputs are not trivially equal: they hold the computed values.
    assert (dirs["slurm"] / "out" / "summary.tsv").read_text() == "a\t517495\nb\t528220\n"


@pytest.mark.slurm
def test_failed_job_is_reported_not_awaited(slurm_cluster, failing_run):
    """A job that fails ends the run with its SLURM state, instead of being polled forever
    (what happens with the plugin's default `sacct` on a cluster without slurmdbd)."""
    proc, log = failing_run
    returncode = proc.wait(timeout=300)
    out = log.read_text()
    assert returncode != 0
    (_, jobid), = SUBMITTED.findall(out)
    assert f"SLURM-job '{jobid}' failed, SLURM status is: 'FAILED'" in out
    info = slurm_cluster.show_job(jobid)
    # The batch script's status is that of Snakemake inside the job, not the rule's 3.
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0"
    # the job-completion log keeps the same final state for after slurmctld purges the job
    record, = [line for line in (slurm_cluster.state / "log" / "jobcomp.log").read_text().splitlines()
               if line.startswith(f"JobId={jobid} ")]
    assert _key_values(record)["JobState"] == "FAILED"


# --- the profile itself ---------------------------------------------------------------------


def test_profile_name_resolves_from_repo_root(monkeypatch):
    """`snakemake --profile slurm` from the root finds ./slurm -> profiles/slurm."""
    from snakemake.cli import get_profile_dir

    monkeypatch.chdir(REPO)
    found = get_profile_dir("slurm")
    assert found is not None, "no ./slurm profile at the repository root"
    assert found[1].resolve() == (PROFILE / "config.yaml").resolve()


def test_profile_site_settings_from_environment(monkeypatch):
    from snakemake.profiles import ProfileConfigFileParser

    def parse() -> dict:
        with open(PROFILE / "config.yaml") as f:
            return ProfileConfigFileParser().parse(f)

    for var in ("SELFKNOW_SLURM_PARTITION", "SELFKNOW_SLURM_ACCOUNT", "SELFKNOW_SLURM_GPU_PARTITION", "SELFKNOW_SLURM_GPU_MODEL"):
        monkeypatch.delenv(var, raising=False)
    bare = parse()
    assert bare["executor"] == "slurm" and bare["slurm-status-command"] == "squeue"
    assert "gpu=0" in bare["default-resources"]
    assert not any("partition" in r or "account" in r or "gpu_model" in r for r in bare["default-resources"])
    # No rule is listed: GPUs and the GPU partition follow from what a job loads (workflow).
    assert not bare.get("set-resources")

    monkeypatch.setenv("SELFKNOW_SLURM_PARTITION", "cpuq")
    monkeypatch.setenv("SELFKNOW_SLURM_ACCOUNT", "proj42")
    monkeypatch.setenv("SELFKNOW_SLURM_GPU_PARTITION", "gpuq")
    monkeypatch.setenv("SELFKNOW_SLURM_GPU_MODEL", "a100")
    site = parse()
    assert "slurm_partition=cpuq" in site["default-resources"]
    assert "slurm_account=proj42" in site["default-resources"]
    assert not site.get("set-resources")


@pytest.mark.parametrize("profile", ["slurm", "local"])
def test_profile_every_key_commented(profile):
    """Every option and every rule class of the profile (top level and one level down) has a
    comment above it (YTE's `?if` lines are template directives, not keys)."""
    lines = (REPO / "profiles" / profile / "config.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^( {0,2})(\w[^:#]*):", line)
        if not m or m.group(2).startswith("__"):
            continue
        prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        parent_block = len(m.group(1)) > 0 and prev.endswith(":")
        assert prev.startswith("#") or "#" in line or parent_block, f"{profile}: key without a comment: {line!r}"


# --- the project's tiny config ----------------------------------------------------------------


@pytest.mark.skipif(not TINY_CONFIG.exists(), reason="config/test.yaml (the tiny config) does not exist yet")
def test_design_command_from_repo_root():
    """`snakemake --profile slurm all_tables`, as the design writes it, plans the DAG from the
    root with the profile's resources (a dry run: no cluster needed)."""
    config = [] if (REPO / "config.yaml").exists() else ["--configfile", str(TINY_CONFIG)]
    proc = _snakemake(*config, "--profile", "slurm", "all_tables", "-n", cwd=REPO, env=dict(os.environ), timeout=300)
    out = proc.stdout + proc.stderr
    assert "Using profile slurm" in out
    jobs = re.findall(r"^rule (\w+):\n(?:.*\n)*?\s+resources: (.*)$", out, re.M)
    assert jobs, out[-2000:]
    for rule, resources in jobs:
        if rule == "all_tables":
            continue
        assert "runtime=" in resources and "mem_mb=" in resources, (rule, resources)


#: Outputs of the local tiny run (paths under its results) that the SLURM run rebuilds
#: (`--forcerun`), with every job downstream of them: greedy generation on a world model, the
#: LLM judge on the converted SmolLM2, a LADDER score, the LCAE Stage 3 fit, and the tables and
#: figures of every paper that read them, including the world evolution table, the judge audit,
#: a local rule on the submitting host (the LADDER appendix) and the knowledge card.
FORCE = ("generations/wm-small", "ladder/scores/wm-small/sessions.parquet", "lcae/stage3.parquet",
         "tables/persistent/table1.csv")
FULL = os.environ.get("SELFKNOW_SLURM_FULL") == "1"


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(not TINY_CONFIG.exists(), reason="config/test.yaml (the tiny config) does not exist yet")
def test_tiny_config_on_slurm_equals_local(slurm_cluster, work_dir, tiny_run):
    """The tiny config through `--profile profiles/slurm` gives the same outputs as the local
    run: on a copy of the session's local tiny run, the jobs that make FORCE and every job
    downstream (or, SELFKNOW_SLURM_FULL=1, the whole DAG from nothing but the local run's
    model-call cache) run, exactly the jobs a dry run lists, those off the local rules through
    sbatch, each COMPLETED; no model call is made anew (the local run's cache answers all);
    the rebuilt outputs equal the local ones (numbers up to float rounding) and every table
    does."""
    out = work_dir / "tiny" / "slurm"
    results = out / "results"
    out.mkdir(parents=True)
    if FULL:
        shutil.copytree(tiny_run / "cache", results / "cache")
        options = ["--forceall"]
    else:
        copy_results(tiny_run, results, copy=("logs", "benchmarks"))
        options = ["--forcerun", *(str(results / f) for rel in FORCE for f in _files(results, rel))]
    cached = {p.name for p in (results / "cache").rglob("*.json")}
    expected = dry_run(TINY_CONFIG, results, *options)
    if not FULL:
        # the variety the comment of FORCE promises
        assert {"generate_greedy", "llm_judge", "ladder_score", "lcae_stage3", "persistent_table1",
                "world_evolution_table", "judge_audit_table", "ladder_tables", "ladder_appendix", "lcae_tables",
                "knowledge_card"} <= {j.rule for j in expected}

    args = ["--snakefile", str(REPO / "Snakefile"), "--configfile", str(TINY_CONFIG),
            "--config", f"results={results}", "--profile", str(PROFILE), *_fast_polling()]
    t0 = time.monotonic()
    proc = _snakemake(*args, "all_tables", *options, cwd=out, env=slurm_cluster.env, timeout=3600)
    slurm_cluster.timings["tiny config slurm run"] = time.monotonic() - t0
    log = proc.stdout + proc.stderr

    # exactly the jobs of the dry run ran; the profile submits all but the local rules'
    assert parse_dry_run(log, results) == expected
    submitted = SUBMITTED.findall(log)
    assert submitted and len(submitted) == len(re.findall(r"^rule \S+:$", log, re.M)), log[-4000:]
    for _, sid in submitted:
        info = slurm_cluster.show_job(sid)
        assert info["JobState"] == "COMPLETED", info
    assert dry_run(TINY_CONFIG, results) == set(), "the SLURM run left jobs to do"
    assert {p.name for p in (results / "cache").rglob("*.json")} == cached, "a model call missed the cache"

    rebuilt = sorted({o for j in expected for o in j.outputs})
    _assert_same_outputs(tiny_run, results, rebuilt)


def _files(root: Path, rel: str) -> list[str]:
    p = root / rel
    return [rel] if p.is_file() else sorted(str(f.relative_to(root)) for f in p.rglob("*") if f.is_file())


def _assert_same_outputs(local: Path, slurm: Path, outputs: list[str]) -> None:
    """Every table of both runs, and every rebuilt file (`outputs`, under the results
    directories) that holds data, equal: the same files, rows and text, numbers equal up to
    float rounding. Provenance sidecars, logs and figures carry run times and are left out."""
    def tables(root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in (root / "tables").rglob("*") if p.suffix in (".csv", ".md"))

    names = tables(local)
    assert names, "the local run made no tables"
    assert names == tables(slurm)
    data = sorted({f for rel in outputs for f in _files(local, rel) if Path(f).suffix in (".parquet", ".csv", ".md")})
    assert {f for f in data if f.startswith("tables/")} <= set(names)
    for f in sorted(set(names) | set(data)):
        assert (slurm / f).is_file(), f"the SLURM run did not rebuild {f}"
    _, mismatch, errors = filecmp.cmpfiles(local, slurm, sorted(set(names) | set(data)), shallow=False)
    assert not errors, f"unreadable outputs: {errors}"
    # A model call is cached by whichever job asks first (LADDER, LCAE and generation share
    # cloze scores), and batched float arithmetic differs in the last bits with the batch it
    # ran in; SLURM runs jobs in another order than a local run, so numbers may differ there.
    differing = [n for n in mismatch if n.endswith((".csv", ".parquet"))]
    for name in differing:
        _assert_same_table(local / name, slurm / name)
    rendered = {n for n in mismatch if n.endswith(".md")}
    assert rendered <= {n[:-4] + ".md" for n in differing if n.endswith(".csv")}, \
        f"rendered tables differ although their CSVs are identical: {sorted(rendered)}"


def _assert_same_table(a: Path, b: Path) -> None:
    """Same columns, rows and text cells; numeric cells equal to float32 rounding (1e-6)."""
    read = pd.read_parquet if a.suffix == ".parquet" else pd.read_csv
    pd.testing.assert_frame_equal(read(a), read(b), check_dtype=False, check_exact=False,
                                  rtol=1e-6, atol=1e-9, obj=a.name)
