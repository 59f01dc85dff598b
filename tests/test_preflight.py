"""`selfknow preflight` (issue #26 item 4): on a rehearsal-like setup (the stand-in server on
127.0.0.1, a hub cache, local dataset copies) it passes; with a key unset, a path missing or the
server down it prints one line each, naming the config key."""
from __future__ import annotations

import json

import pytest

from selfknow.cli import main
from selfknow.config import validate_config
from selfknow.preflight import SKIP_ENV, check_served_here, preflight, preflight_or_stop
from selfknow.rehearsal.server import StandInServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MMLU = {"question": "Q?", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 1}


@pytest.fixture
def server():
    s = StandInServer(["qwen-max", "gpt-5.4"], reasoning=["gpt-5.4"])
    yield s
    s.close()


@pytest.fixture
def setup(tmp_path, monkeypatch, server):
    """A validated config: two API models on the stand-in server, one hf model in a hub cache
    at its pinned revision, one local dataset copy; keys set, hub offline."""
    cache = tmp_path / "hf"
    repo = cache / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "step1").write_text(COMMIT)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DASHSCOPE_API_KEY", "k")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.delenv(SKIP_ENV, raising=False)
    data = tmp_path / "mmlu.jsonl"
    data.write_text("".join(json.dumps({**MMLU, "question": f"Q{i}?"}) + "\n" for i in range(2)))
    config = {
        "seed": 1, "preflight": True,
        "models": [
            {"name": "qwen-max", "backend": "openai", "base_url": server.url, "model": "qwen-max",
             "api_key_env": "DASHSCOPE_API_KEY"},
            {"name": "gpt-5.4", "backend": "openai", "base_url": server.url, "model": "gpt-5.4",
             "api_key_env": "OPENAI_API_KEY", "request_preset": "openai_reasoning"},
            {"name": "tiny", "backend": "hf", "hub_id": "org/tiny", "checkpoints": [{"name": "s1", "revision": "step1"}]},
        ],
        "datasets": {"mmlu": {"loader": "mmlu", "path": str(data), "subjects": ["anatomy"], "subject_range": [0, 2]}},
    }
    validate_config(config, "test")
    return config


def test_rehearsal_like_setup_passes(setup):
    assert preflight(setup) == []
    preflight_or_stop(setup)


def test_key_unset_names_the_key(setup, monkeypatch):
    monkeypatch.delenv("DASHSCOPE_API_KEY")
    assert preflight(setup) == ["models[qwen-max].api_key_env: environment variable DASHSCOPE_API_KEY is not set"]


def test_path_missing_names_the_key(setup, tmp_path):
    setup["datasets"]["mmlu"]["path"] = str(tmp_path / "nope.jsonl")
    assert preflight(setup) == [f"datasets.mmlu.path: {tmp_path / 'nope.jsonl'} does not exist"]


def test_malformed_copy_names_the_key_file_row_and_field(setup):
    path = setup["datasets"]["mmlu"]["path"]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**MMLU, "answer": "B"}) + "\n")
    assert preflight(setup) == [f"datasets.mmlu.path: mmlu: {path}: line 3: field 'answer' must be int, got str 'B'"]


def test_server_down_names_each_model_once(setup, server):
    server.close()
    got = preflight(setup, timeout_s=2)
    assert len(got) == 2 and [g.split(":")[0] for g in got] == ["models[qwen-max].base_url", "models[gpt-5.4].base_url"]
    assert all("unreachable" in g for g in got)


def test_revision_missing_from_the_offline_cache_names_the_checkpoint(setup):
    setup["models"][2]["checkpoints"][0]["revision"] = "step2"
    (line,) = preflight(setup)
    assert line.startswith("models[tiny].checkpoints[s1].revision: org/tiny@step2 is not in the hub cache")


def test_a_model_the_endpoint_does_not_list(setup):
    setup["models"][0]["model"] = "qwen-ultra"
    assert preflight(setup) == [f"models[qwen-max].model: 'qwen-ultra' is not among the models "
                                f"{setup['models'][0]['base_url']}/models lists"]


def test_launch_hook_stops_listing_problems_and_can_be_skipped(setup, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(RuntimeError, match="(?s)1 problem.*models\\[gpt-5.4\\].api_key_env"):
        preflight_or_stop(setup)
    monkeypatch.setenv(SKIP_ENV, "1")
    preflight_or_stop(setup)
    monkeypatch.delenv(SKIP_ENV)
    preflight_or_stop({**setup, "preflight": False})


def test_cli_prints_one_line_per_problem(setup, tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.delenv("DASHSCOPE_API_KEY")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(setup))
    assert main(["preflight", str(cfg)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "models[qwen-max].api_key_env: environment variable DASHSCOPE_API_KEY is not set"]


def test_a_script_based_hub_dataset_names_the_key_and_the_datasets_version(setup, tmp_path):
    """A repository with only a loading script: `datasets` 4+ refuses it (3.x without
    trust_remote_code too); preflight says so before a launch."""
    datasets = pytest.importorskip("datasets")
    repo = tmp_path / "org--scripted"
    repo.mkdir()
    (repo / "scripted.py").write_text("import datasets\n")
    setup["datasets"]["mmlu"] = {**setup["datasets"]["mmlu"], "hub_id": str(repo), "config_name": "all",
                                 "revision": "main"}
    del setup["datasets"]["mmlu"]["path"]
    (line,) = preflight(setup)
    assert line.startswith(f"datasets.mmlu.hub_id: {repo}@main does not load with datasets {datasets.__version__}")


def test_every_problem_of_a_config_one_line_each_naming_the_model(setup, tmp_path, monkeypatch, capsys):
    """Five problems of five kinds: all reported, each model by its name, one exit status."""
    import yaml

    monkeypatch.delenv("DASHSCOPE_API_KEY")
    setup["models"][2]["checkpoints"][0]["revision"] = "step2"
    setup["models"] += [{"name": "local-a", "backend": "hf", "path": str(tmp_path / "a")},
                        {"name": "local-b", "backend": "hf", "checkpoints": [{"name": "s9", "path": str(tmp_path / "b")}]}]
    setup["datasets"]["mmlu"]["path"] = str(tmp_path / "nope.jsonl")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(json.dumps(setup))))
    assert main(["preflight", str(cfg)]) == 1
    out = capsys.readouterr()
    assert [line.split(":")[0] for line in out.out.splitlines()] == [
        "models[qwen-max].api_key_env", "models[local-a].path", "models[local-b].checkpoints[s9].path",
        "models[tiny].checkpoints[s1].revision", "datasets.mmlu.path"]
    assert "preflight: 5 problem(s)" in out.err


def test_a_model_served_at_localhost_is_refused_for_jobs_on_cluster_nodes(setup, monkeypatch):
    """The stand-in server listens on 127.0.0.1: fine for a local run; for a SLURM run each
    job that calls it (an API model's jobs go to the CPU partition) would reach its own node."""
    monkeypatch.setenv("SELFKNOW_SLURM_PARTITION", "cpu")
    assert preflight(setup) == []
    got = preflight(setup, cluster=True)
    assert [g.split(":")[0] for g in got] == ["models[qwen-max].base_url", "models[gpt-5.4].base_url"]
    assert all("run on cluster nodes (cpu)" in g and "docs/slurm.md" in g for g in got)
    monkeypatch.delenv("SELFKNOW_SLURM_PARTITION")
    setup["models"][0]["base_url"] = "http://vllm.node07:8002/v1"  # a named host: its jobs reach it
    setup["models"][1]["base_url"] = "http://[::1]:8002/v1"
    (line,) = check_served_here(setup)
    assert line.startswith("models[gpt-5.4].base_url: http://[::1]:8002/v1 is the node a job runs on")
    assert "(the cluster's default partition)" in line


@pytest.fixture
def black_hole():
    """A port on 127.0.0.1 that takes connections and never answers, as a host whose network
    drops every packet would leave a client waiting."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_without_network_preflight_ends_within_its_bound_naming_what_it_could_not_reach(setup, tmp_path, black_hole):
    """No network: the hub (HF_ENDPOINT) and an API endpoint never answer. Preflight ends
    within its stated bound (timeout + 1 s, plus local checks) and names both, and each hub
    check it skipped; before, the hub libraries retried for minutes."""
    import subprocess
    import sys

    import yaml

    setup["models"][0]["base_url"] = f"{black_hole}/v1"
    setup["models"][2]["checkpoints"][0]["revision"] = "step2"  # not in the cache: the hub is asked
    setup["datasets"]["hubbed"] = {"loader": "mmlu", "hub_id": "cais/mmlu", "config_name": "all",
                                   "revision": "c30699e", "subjects": ["anatomy"], "subject_range": [0, 2]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(json.dumps(setup))))
    # the slack is generous: the assertion tells a bounded wait from the minutes of retries the
    # hub libraries made before, not how fast a loaded machine runs the local checks
    timeout_s, slack_s = 2.0, 30.0
    script = ("import json, sys, time\nfrom selfknow.rehearsal.harness import load_config\n"
              "from selfknow.preflight import preflight\nimport datasets, huggingface_hub\n"
              f"cfg = load_config([{str(cfg)!r}], check_paths=False)\nt = time.monotonic()\n"
              f"problems = preflight(cfg, timeout_s={timeout_s})\n"
              "print(json.dumps({'s': time.monotonic() - t, 'problems': problems}))\n")
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_ENDPOINT": black_hole}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["s"] <= timeout_s + 1 + slack_s, got
    lines = got["problems"]
    assert f"models[qwen-max].base_url: {black_hole}/v1/models unreachable (no answer within 2 s)" in lines
    hub = f"not checked: the hub {black_hole} is unreachable (no answer within 2 s)"
    assert f"models[tiny].checkpoints[s1].revision: org/tiny@step2 {hub}" in lines
    assert f"datasets.hubbed.hub_id: cais/mmlu@c30699e {hub}" in lines
    assert len(lines) == 3, lines


def test_a_hub_that_answers_but_hangs_on_a_check_is_bounded_per_check(setup, monkeypatch):
    """The hub answers preflight's probe, then never answers the checkpoint's model-info
    request: that check ends at the timeout, naming it."""
    import http.server
    import threading
    import time

    release = threading.Event()

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def do_GET(self):
            release.wait(30)

        def log_message(self, *args):
            pass

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{hub.server_address[1]}"
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", url)
        setup["models"][2]["checkpoints"][0]["revision"] = "step2"  # not in the cache: the hub is asked
        start = time.monotonic()
        got = preflight(setup, timeout_s=1)
        assert time.monotonic() - start < 1 + 1 + 5  # the probe, then one bounded check, plus slack
        assert got == ["models[tiny].checkpoints[s1].revision: org/tiny@step2: TimeoutError: no answer within 1 s"]
    finally:
        release.set()
        hub.shutdown()
        hub.server_close()
