"""Where each job of the workflow runs and what it asks for (selfknow.placement,
rules/common.smk model_resources): every job of the paper and tiny configs, dry-run under the
SLURM profile's defaults with a site's partitions set, is checked against the models its script
is handed (the specs in its params), computed here independently of the workflow's estimate."""
from __future__ import annotations

import pytest

from conftest import REPO
from dag import dag_jobs
from selfknow import placement

SITE = {"SELFKNOW_SLURM_PARTITION": "cpu", "SELFKNOW_SLURM_GPU_PARTITION": "gpu", "SELFKNOW_SLURM_GPU_MODEL": "a100"}
BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
GPU_GB = 80  # the paper's GPU class (A100/H100 80 GB)
HOST_GB_PER_GPU = 128  # a GPU node's host memory per GPU (1 TB for 8 GPUs)


def test_a_job_with_gpus_goes_to_the_gpu_partition_with_its_type():
    assert placement.partition(2, SITE) == "gpu" and placement.gpu_model(2, SITE) == "a100"
    assert placement.partition(0, SITE) == "cpu" and placement.gpu_model(0, SITE) is None
    # one partition for everything; no partition at all: the cluster's default
    assert placement.partition(1, {"SELFKNOW_SLURM_PARTITION": "all"}) == "all"
    assert placement.partition(1, {}) is None and placement.gpu_model(1, {}) is None
    assert placement.partition(0, {"SELFKNOW_SLURM_GPU_PARTITION": "gpu"}) is None


def test_a_job_holding_two_models_asks_for_both():
    a = {"name": "a", "gpu": 1, "params_b": 8.0, "dtype": "bfloat16"}
    b = {"name": "b", "gpu": 2, "mem_mb": 5000}
    api = {"name": "c", "gpu": 0, "mem_mb": 1000}
    assert placement.job_gpus([(a, 1), (b, 1), (api, 1)]) == 3
    one = placement.job_mem_mb([(a, 1)])
    assert one >= 8e9 * 2 / 2**20 and placement.job_mem_mb([(a, 1), (b, 1)]) == one + 5000
    assert placement.job_mem_mb([(a, 3)]) > 3 * 8e9 * 2 / 2**20


def _specs(value) -> dict[str, dict]:
    """Every model spec (a mapping with a name and a backend) anywhere in a job's params."""
    if isinstance(value, dict):
        if {"backend", "name"} <= set(value):
            return {value["name"]: value}
        return {k: s for v in value.values() for k, s in _specs(v).items()}
    if isinstance(value, (list, tuple)):
        return {k: s for v in value for k, s in _specs(v).items()}
    return {}


def _profile_defaults() -> list[str]:
    from snakemake.profiles import ProfileConfigFileParser

    with open(REPO / "profiles" / "slurm" / "config.yaml") as f:
        return ProfileConfigFileParser().parse(f)["default-resources"]


def _check_jobs(config: str, tmp_path, monkeypatch) -> dict[str, set]:
    """Check every job; return rule -> the set of (partition, GPUs) of its jobs."""
    for k, v in SITE.items():
        monkeypatch.setenv(k, v)
    placed = {}
    for job in dag_jobs(REPO / "config" / config, tmp_path / "results", _profile_defaults()):
        if job.rule.name in job.dag.workflow._localrules or job.rule.norun:
            continue  # runs on the submitting host
        res = job.resources
        # `config` is the part of the config a table job records as provenance, not models it loads
        specs = _specs({k: v for k, v in job.params.items() if k != "config"})
        gpus = sum(s["gpu"] for s in specs.values())
        where = f"{job.rule.name} {dict(job.wildcards)}"
        assert res.get("gpu") == gpus, f"{where}: gpu={res.get('gpu')}, its models {sorted(specs)} hold {gpus}"
        assert res.get("slurm_partition") == ("gpu" if gpus else "cpu"), where
        assert res.get("gpu_model") == ("a100" if gpus else None), where
        assert res.get("runtime", 0) > 0 and res.get("mem_mb", 0) > 0, where
        weights = [s["params_b"] * 1e9 * BYTES[s["dtype"]] for s in specs.values() if "params_b" in s]
        # every model's weights pass through host memory once (loading), all at once at most
        assert res["mem_mb"] * 2**20 >= sum(weights), f"{where}: {res['mem_mb']} MB for {sum(weights) / 1e9:.0f} GB"
        assert res["mem_mb"] * 1e6 <= HOST_GB_PER_GPU * 1e9 * max(1, gpus), f"{where}: {res['mem_mb']} MB"
        for s in specs.values():  # each model's weights fit on the GPUs it asks for
            if s["gpu"] and "params_b" in s:
                assert s["params_b"] * BYTES[s["dtype"]] / s["gpu"] <= 0.9 * GPU_GB, s["name"]
        placed.setdefault(job.rule.name, set()).add((res["slurm_partition"], gpus))
    return placed


def test_paper_config_puts_every_gpu_job_on_the_gpu_partition(tmp_path, monkeypatch):
    placed = _check_jobs("paper.yaml", tmp_path, monkeypatch)
    on_gpu = {r for r, p in placed.items() if any(g for _, g in p)}
    assert on_gpu >= {"persistent_sc", "persistent_variant", "persistent_transfer_variant",
                      "persistent_variance_adapters", "persistent_gcm_released", "ladder_answers", "ladder_prompted",
                      "ladder_extension", "generate_greedy", "lcae_stage1", "lcae_stage2"}
    assert ("gpu", 2) in placed["persistent_variant"]  # Olmo 3 32B
    # API models' jobs of the same rules ask for no GPU
    assert ("cpu", 0) in placed["ladder_answers"] and ("cpu", 0) in placed["lcae_stage1"]
    # the simulated user (an API model) replies in CPU jobs, whoever the examinee
    assert placed["ladder_sessions"] == {("cpu", 0)}
    assert all(p == {("cpu", 0)} for r, p in placed.items() if r not in on_gpu)


def test_tiny_config_asks_for_no_gpu(tmp_path, monkeypatch):
    placed = _check_jobs("test.yaml", tmp_path, monkeypatch)
    assert {"persistent_sc", "ladder_answers", "ladder_sessions", "lcae_stage1"} <= set(placed)
    assert all(p == {("cpu", 0)} for p in placed.values())


def test_a_local_judge_puts_its_gpus_on_the_jobs_that_load_it(tmp_path, monkeypatch):
    """The paper config with a local judge (Qwen3-8B on one GPU) instead of the API one: the
    judge audit and every persistent judge job become GPU jobs of the judge's size, and the
    beam-search jobs, which no longer load the judge, keep their own model's GPUs."""
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["judge"]["llm_judge"] = "qwen3-8b"
    local = tmp_path / "local_judge.yaml"
    local.write_text(yaml.safe_dump(cfg))
    placed = _check_jobs(str(local), tmp_path, monkeypatch)  # an absolute path replaces config/
    assert placed["llm_judge"] == {("gpu", 1)}
    assert placed["persistent_judge"] == {("gpu", 1)}
    # olmo3-7b, marin-8b and the GCM backbone: 1; olmo3-32b: 2
    assert placed["persistent_sc"] == {("gpu", 1), ("gpu", 2)}


def test_slurm_logs_go_under_the_runs_results(tmp_path):
    from snakemake.profiles import ProfileConfigFileParser

    (tmp_path / "config.yaml").write_text("results: out\n")
    (tmp_path / "paper.yaml").write_text("results: /big/paper\n")
    logdir = lambda *argv: placement.slurm_logdir(["snakemake", *argv], cwd=tmp_path)  # noqa: E731
    assert logdir("--profile", "slurm") == "out/logs/slurm"  # the default config.yaml
    assert logdir("all_tables", "--configfile", "paper.yaml") == "/big/paper/logs/slurm"
    assert logdir("--configfile=paper.yaml", "--config", "seed=2", "results=/s/r") == "/s/r/logs/slurm"
    assert logdir("--configfile", "config.yaml", "paper.yaml", "-n") == "/big/paper/logs/slurm"
    assert logdir("--configfile", str(tmp_path / "none.yaml")) == "results/logs/slurm"  # the schema's default
    with open(REPO / "profiles" / "slurm" / "config.yaml") as f:
        assert ProfileConfigFileParser().parse(f)["slurm-logdir"].endswith("logs/slurm")


def test_multi_checkpoint_jobs_with_views_in_files_ask_for_scratch(tmp_path, monkeypatch):
    """Olmo 3 32B's views (64 GB each) wait in $TMPDIR files: its variant jobs with several
    views ask for them all as disk (sbatch --tmp); the 7-8B ones, whose views wait in memory,
    for none. A site's own sbatch flags (`--default-resources "slurm_extra='--exclusive'"`)
    reach every submitted job, those with scratch included."""
    for k, v in SITE.items():
        monkeypatch.setenv(k, v)
    scratch, submitted = {}, 0
    for job in dag_jobs(REPO / "config" / "paper.yaml", tmp_path / "results",
                        _profile_defaults() + ["slurm_extra='--exclusive'"]):
        if job.rule.name in job.dag.workflow._localrules or job.rule.norun:
            continue
        submitted += 1
        extra = job.resources.get("slurm_extra") or ""
        assert extra.split()[0] == "--exclusive", f"{job}: slurm_extra {extra!r}"
        if job.rule.name in ("persistent_variant", "persistent_transfer_variant", "persistent_variance_adapters"):
            tmp = [o for o in extra.split() if o.startswith("--tmp=")]
            mb = int(tmp[0][len("--tmp="):-1]) if tmp else 0
            assert not tmp or job.resources["disk_mb"] == mb
            scratch.setdefault(job.wildcards["model"], set()).add(mb)
    assert submitted > 400
    assert scratch["olmo3-7b"] == {0} and scratch["marin-8b"] == {0}
    big = max(scratch["olmo3-32b"])
    assert big >= 4 * 64e9 / 2**20  # four views of 32B parameters in bf16


def test_site_and_job_sbatch_flags_join():
    assert placement.join_slurm_extra("--exclusive", placement.scratch_request(5)) == "--exclusive --tmp=5M"
    assert placement.join_slurm_extra(None, placement.scratch_request(0)) == ""
    assert placement.join_slurm_extra(" --qos=high ", "") == "--qos=high"
