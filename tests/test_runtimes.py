"""A cluster run that finishes: under the SLURM profile every job of the paper config gets a
time limit at least the plan's estimate of its wall time (`selfknow plan` writes the limits the
rules take), and no job calls a model served on localhost, which is whatever node SLURM picks."""
from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest

from conftest import REPO
from selfknow.placement import runtime_key
from selfknow.plan import planned_jobs
from selfknow.plan_runtimes import MAX_RUNTIME_MIN, RUNTIME_MARGIN
from test_placement import _profile_defaults, _specs

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


@pytest.mark.slow
def test_paper_jobs_fit_their_time_limits_and_reach_no_localhost(tmp_path):
    config, results = REPO / "config" / "paper.yaml", tmp_path / "results"
    limits_file = results / "plan" / "runtimes.json"
    # the limits `selfknow plan` writes (make_plan's write_runtimes), then the DAG that reads them
    jobs = planned_jobs(config, results=results, default_resources=_profile_defaults(), runtimes=limits_file)
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
