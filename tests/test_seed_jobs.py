"""`persistent.seeds_in_one_job`: one job trains every seed of a variant, or of the GCM, one
after another, and writes the files a job per seed would."""
import pytest

from conftest import REPO
from dag import dag_jobs
from selfknow.config import load_config
from selfknow.protocols.persistent import rule_jobs


def test_a_seeds_job_runs_each_seed_in_order_on_its_own_files(monkeypatch):
    calls = []

    def variant_job(variant, *, out, adapters_dir, seed, threads, **kw):
        calls.append((variant, out, adapters_dir, seed, threads, kw))
        return {"adapters": 2, "train_seconds": 1.5}

    monkeypatch.setattr(rule_jobs.jobs, "variant_job", variant_job)
    got = rule_jobs.variant_seeds([3, 1], ["c3.parquet", "c1.parquet"], ["a3", "a1"], "oracle_multi", 1, spec={"n": 1})
    assert calls == [("oracle_multi", "c3.parquet", "a3", 3, 1, {"spec": {"n": 1}}),
                     ("oracle_multi", "c1.parquet", "a1", 1, 1, {"spec": {"n": 1}})]
    assert got == {"seeds": 2, "adapters": 4, "train_seconds": 3.0}


def test_a_failing_seed_fails_the_job(monkeypatch):
    def gcm_job(*, seed, **kw):
        if seed == 1:
            raise ValueError("seed 1")
        return {"rows": 1}

    monkeypatch.setattr(rule_jobs.jobs, "gcm_job", gcm_job)
    with pytest.raises(ValueError, match="seed 1"):
        rule_jobs.gcm_seeds([0, 1], ["g0", "g1"], ["d0", "d1"], 1)


@pytest.fixture(scope="module")
def default_jobs(tmp_path_factory):
    return dag_jobs(REPO / "config.yaml", tmp_path_factory.mktemp("seeds") / "results", forceall=True)


def test_the_default_trains_a_variants_seeds_in_one_job(default_jobs):
    seeds = load_config(REPO / "config.yaml")["persistent"]["seeds"]
    assert len(seeds) > 1
    producer = {}
    for job in default_jobs:
        for f in job.output:
            assert f not in producer, f"{f}: written by {producer[f]} and {job}"
            producer[f] = job.rule.name
    grouped = [j for j in default_jobs if j.rule.name == "persistent_variant_seeds"]
    assert grouped
    for job in grouped:
        w = job.wildcards
        assert job.params.seeds == seeds
        assert [f.split("/persistent/conf/")[1] for f in job.output.out] == [
            f"{w.model}/{w.dataset}/{w.variant}/seed{s}.parquet" for s in seeds]
        assert [f.split("/persistent/adapters/")[1] for f in job.output.adapters_dir] == [
            f"{w.model}/{w.dataset}/{w.variant}/seed{s}" for s in seeds]
    # a job per seed only where a variant takes fewer seeds: the random-label one (its first)
    # and those whose first seed is cut from the transfer variant's table
    per_seed = [j for j in default_jobs if j.rule.name == "persistent_variant"]
    sliced = {j.wildcards.variant for j in default_jobs if j.rule.name == "persistent_variant_slice"}
    assert {j.wildcards.variant for j in per_seed} == {"random_label", *sliced}
    assert all(j.wildcards.seed != str(seeds[0]) for j in per_seed if j.wildcards.variant in sliced)
    assert [j.params.seeds for j in default_jobs if j.rule.name == "persistent_gcm_seeds"] == [seeds, seeds]
    assert not any(j.rule.name == "persistent_gcm" for j in default_jobs)


def test_the_paper_config_keeps_a_job_per_seed():
    assert load_config(REPO / "config" / "paper.yaml")["persistent"]["seeds_in_one_job"] is False
