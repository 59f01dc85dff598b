"""A cluster run that finishes: under the SLURM profile every job of the paper config gets a
time limit at least the plan's estimate of its wall time (`selfknow plan` writes the limits the
rules take) wherever the run writes its results, and no job calls a model served on localhost,
which is whatever node SLURM picks."""
from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest
import yaml

from conftest import REPO
from selfknow.placement import runtime_key, runtimes_files
from selfknow.plan import planned_jobs
from selfknow.plan_runtimes import MAX_RUNTIME_MIN, RUNTIME_MARGIN
from test_placement import _profile_defaults, _specs

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def _paper_config(tmp_path, results):
    """config/paper.yaml with its `results:` at `results`, written in `tmp_path` (its relative
    dataset paths made absolute, as read from config/)."""
    raw = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    raw["results"] = str(results)
    for spec in raw["datasets"].values():
        for key in ("path", "possible_answer_path"):
            if key in spec:
                spec[key] = str((REPO / "config" / spec[key]).resolve())
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_runtimes_files_follow_the_config_when_results_go_elsewhere(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("results: mine\n")
    assert runtimes_files("mine", [cfg]) == ["mine/plan/runtimes.json"]
    assert runtimes_files("/scratch/x", [cfg]) == ["/scratch/x/plan/runtimes.json", "mine/plan/runtimes.json"]
    assert runtimes_files("/scratch/x", [tmp_path / "none.yaml"])[1] == "results/plan/runtimes.json"


@pytest.mark.slow
def test_paper_jobs_fit_their_time_limits_and_reach_no_localhost(tmp_path):
    # planned as `selfknow plan config/paper.yaml` plans (limits under the config's `results`),
    # launched as cluster users launch it: `--config results=/scratch/...`
    own, elsewhere = tmp_path / "own", tmp_path / "scratch"
    config, limits_file = _paper_config(tmp_path, own), own / "plan" / "runtimes.json"
    jobs = planned_jobs(config, results=elsewhere, default_resources=_profile_defaults(), runtimes=limits_file)
    assert not (elsewhere / "plan").exists()
    limits = json.loads(limits_file.read_text())
    assert len(jobs) > 400  # every job that makes model requests
    over, local = [], []
    for job, hours in jobs:
        where = f"{job.rule} {dict(job.wildcards)}"
        limit = job.resources["runtime"]
        if 60 * hours > limit:
            over.append(f"{where}: planned {60 * hours:.0f} min, limit {limit}")
        assert limit <= MAX_RUNTIME_MIN or job.rule in ("persistent_judge", "llm_judge"), where
        local += [f"{where}: {s['name']} at {s['base_url']}" for s in _specs(dict(job.params)).values()
                  if s.get("base_url") and urlparse(s["base_url"]).hostname in LOCAL_HOSTS]
    assert not over, f"{len(over)} jobs planned past their limit, e.g. {over[:3]}"
    assert not local, f"jobs calling a server on their own node: {local[:3]}"
    # the limits follow the plan: Olmo 3 32B's beam search, ~5 h a job, gets its margin
    sc = [(j, h) for j, h in jobs if j.rule == "persistent_sc" and j.wildcards["model"] == "olmo3-32b"]
    assert len(sc) == 21 and all(j.resources["runtime"] >= RUNTIME_MARGIN * 60 * h > 240 for j, h in sc)
    assert all(j.resources["runtime"] == max(240, limits[runtime_key("persistent_sc", j.wildcards)]) for j, _ in sc)
    # a batched judge's jobs wait past the 24 h batch window (then a rerun resumes the batch)
    judge = [j for j, _ in jobs if j.rule == "llm_judge"]
    assert judge and all(j.resources["runtime"] > 24 * 60 for j in judge)
