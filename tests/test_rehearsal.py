"""The rehearsal (`selfknow rehearse`, config/rehearsal.yaml over config/paper.yaml): the
stand-ins load through the real paths, the server keeps the API rules, the rehearsal config
cannot drift from the paper config, and (slow) the whole rehearsal builds every table and
figure of the paper config."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from batch_server import kill_once_waiting
from selfknow.stages.items import build_items
from selfknow.stages.judge import judge_candidates
from selfknow.models import load_lm
from selfknow.rehearsal import data, hub
from selfknow.rehearsal.harness import (api_endpoint, build_stand_ins, environment, load_config, resolved_config,
                                       start_server)
from selfknow.rehearsal.server import StandInServer

ROOT = Path(__file__).resolve().parents[1]
PAPER = ("config/paper.yaml",)
REHEARSAL = ("config/paper.yaml", "config/rehearsal.yaml")
#: what the rehearsal may change: sizes, and where resources come from (`path`, `models`)
SIZE_KEYS = {
    "results", "models",
    "datasets.*.path", "datasets.*.train_range", "datasets.*.test_range",
    "judge.audit_items", "judge.audit_bootstrap",
    "persistent.models", "persistent.n_train", "persistent.n_test", "persistent.min_contrast",
    "persistent.min_contrast_transfer", "persistent.num_beams", "persistent.max_new_tokens", "persistent.seeds",
    "persistent.bootstrap_replicates", "persistent.variance_seeds", "persistent.variance_items",
    "persistent.bootstrap_ece_replicates",
    "ladder.models", "ladder.n_sessions", "ladder.n_turns", "ladder.llm_user_sessions", "ladder.session_bootstrap",
    "ladder.cluster_bootstrap", "ladder.items_per_domain", "ladder.lsa_query_sessions", "ladder.noise_repeats",
    "ladder.random_partitions", "ladder.extension.models", "ladder.react.items_per_domain",
    "ladder.react.max_new_tokens", "ladder.react.configurations",
    *(f"ladder.extension.{t}.{k}" for t in ("gsm8k", "humaneval", "bfcl") for k in ("n_items", "max_new_tokens")),
    "ladder.cross_task.models", "ladder.cross_task.items_per_domain", "ladder.cross_task.max_new_tokens",
    "lcae.n_items", "lcae.examinee_models", "lcae.repeats", "lcae.max_new_tokens",
}
#: model entry keys that are about the machine (devices, memory, concurrency), not the protocol
MACHINE_KEYS = {"params_b", "dtype", "device", "gpu", "base_url", "max_concurrency", "mem_mb", "batch_size",
                "batch_poll_s"}


@pytest.fixture(scope="module")
def configs():
    return load_config([ROOT / f for f in PAPER]), load_config([ROOT / f for f in REHEARSAL])


def _flat(d, prefix=""):
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "prices":
            yield from _flat(v, key + ".")
        else:
            yield key, v


def _pattern(key: str) -> str:
    return re.sub(r"^datasets\.[^.]+\.", "datasets.*.", key)


def test_only_sizes_and_stand_ins_differ_from_the_paper_config(configs):
    paper, rehearsal = (dict(_flat(c)) for c in configs)
    changed = {k for k in paper.keys() | rehearsal.keys() if paper.get(k) != rehearsal.get(k)}
    assert {_pattern(k) for k in changed} <= SIZE_KEYS, sorted(k for k in changed if _pattern(k) not in SIZE_KEYS)
    for panel in ("persistent.models", "ladder.models", "ladder.extension.models", "ladder.cross_task.models",
                  "lcae.examinee_models"):
        assert set(rehearsal[panel]) <= set(paper[panel]), panel


def test_every_rehearsal_model_is_a_paper_model_with_its_protocol_settings(configs):
    """The overlay's stand-ins change only machine keys, the provider profile (every base_url is
    127.0.0.1) and which checkpoints run; the resolved entries keep every other paper setting."""
    overlay = yaml.safe_load((ROOT / "config" / "rehearsal.yaml").read_text(encoding="utf-8"))
    assert "models" not in overlay
    allowed = MACHINE_KEYS | {"checkpoints", "provider"}
    for name, change in overlay["stand_ins"].items():
        assert change.keys() <= allowed, (name, change.keys() - allowed)
    paper = {m["name"]: m for m in configs[0]["models"]}
    for m in configs[1]["models"]:
        ref = paper[m["name"]]
        for key in (ref.keys() | m.keys()) - MACHINE_KEYS - {"checkpoints", "provider"}:
            assert m.get(key) == ref.get(key), (m["name"], key)
        assert all(c in ref.get("checkpoints", []) for c in m.get("checkpoints", [])), m["name"]


def test_every_provider_profile_of_the_paper_is_rehearsed_under_its_own_rules(configs):
    """Every rehearsal API model is served on 127.0.0.1, so it names its provider; that must be
    the profile its paper entry's endpoint gives, and every profile of the paper appears."""
    from selfknow.models.providers import profile_name

    paper = {m["name"]: m for m in configs[0]["models"] if m["backend"] == "openai"}
    rehearsed = {m["name"]: profile_name(m) for m in configs[1]["models"] if m["backend"] == "openai"}
    assert all(rehearsed[n] == profile_name(paper[n]) for n in rehearsed), rehearsed
    assert set(rehearsed.values()) == {profile_name(m) for m in paper.values()}


def test_every_architecture_and_backend_kind_of_the_paper_is_rehearsed(configs):
    def kinds(cfg):
        out = set()
        for m in cfg["models"]:
            if m["backend"] == "hf":
                out.add(("hf", hub.ARCHITECTURES[m["hub_id"]][0], bool(m.get("chat"))))
            else:
                out.add(("openai", m.get("request_preset"), m["logprobs"], m["mode"], m["batch"],
                         "reasoning_tokens" in m))
        return out

    paper_kinds, rehearsal_kinds = kinds(configs[0]), kinds(configs[1])
    # an open-weights model thinking within its limit without logprobs (deepseek-r1, gemini)
    # is the logprobs model's request shape minus logprobs: one of them is enough
    missing = {k for k in paper_kinds - rehearsal_kinds
               if not (k[0] == "openai" and k[5] and ("openai", k[1], True, *k[3:]) in rehearsal_kinds)}
    assert not missing


def _summary(configfiles, results: str, *overrides: str) -> pd.DataFrame:
    out = subprocess.run([sys.executable, "-m", "snakemake", "all_tables", "--summary", "--configfile", *configfiles,
                          "--config", f"results={results}", *overrides], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    rows = [line.split("\t") for line in out.stdout.splitlines() if line.startswith(results)]
    return pd.DataFrame([r[:3] for r in rows], columns=["output_file", "date", "rule"])


def test_rehearsal_builds_the_same_rules_tables_and_figures_as_the_paper(configs, tmp_path):
    names = {m["name"] for c in configs for m in c["models"]} | {"triviaqa", "jeopardy", "bioasq"}

    def targets(df, results):
        out = set()
        for f in df.output_file:
            rel = f[len(results) + 1:]
            if rel.startswith(("tables/", "figures/")):
                out.add("/".join("{name}" if p in names else p for p in Path(rel).parts))
        return out

    paper_dir, rehearsal_dir = str(tmp_path / "p"), str(tmp_path / "r")
    paper, rehearsal = _summary(PAPER, paper_dir), _summary(REHEARSAL, rehearsal_dir)
    assert set(paper.rule) == set(rehearsal.rule)
    paper_targets = targets(paper, paper_dir)
    assert len(paper_targets) > 100 and paper_targets == targets(rehearsal, rehearsal_dir)


# ---- the stand-ins ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def stand_ins(configs, tmp_path_factory):
    """The rehearsal config's stand-ins built under a temporary directory (its datasets'
    `path:` pointed there)."""
    root = tmp_path_factory.mktemp("stand-ins")
    config = json.loads(json.dumps(configs[1]))
    for name, spec in config["datasets"].items():
        spec["path"] = str(root / "data" / Path(spec["path"]).relative_to(".rehearsal/data"))
    cache = build_stand_ins(config, root)
    return config, cache


def test_every_dataset_fixture_passes_its_loader_at_the_rehearsal_sizes(stand_ins):
    """Counts derived from how the fixtures are laid out (selfknow.rehearsal.data): TriviaQA's
    three blacklisted questions sit at evaluation positions 71, 73, 75 (test range [60, 140]);
    Jeopardy's two malformed clues sit a few places after the reserved head (train range
    [0, 60]), its linked clue and duplicate are gone before; MMLU keeps positions 40-64 of 20
    subjects; MedXpertQA has lcae.n_items + 10 rows."""
    config, _ = stand_ins
    sizes = {}
    for name, spec in config["datasets"].items():
        items = build_items(name, spec, config["seed"])
        df = pd.concat(items.values())
        sizes[name] = df.split.value_counts().to_dict()
    assert sizes["triviaqa"] == {"icl": 5, "train": 60, "test": 77}
    assert sizes["jeopardy"] == {"icl": 5, "train": 58, "test": 80}
    assert sizes["mmlu"] == {"test": 500}
    assert sizes["medxpertqa"] == {"test": config["lcae"]["n_items"] + 10}
    per = config["ladder"]["cross_task"]["items_per_domain"] + 2  # rows per category (the suite's and one more) / task
    assert sizes["mmlu_pro"] == {"test": per * (len(config["ladder"]["cross_task"]["suites"]["mmlu_pro"]["domains"]) + 1)}
    assert sizes["bbh_word_sorting"] == {"test": per}
    assert sizes["gsm8k"] == sizes["humaneval"] == sizes["bfcl_simple"] == {"test": data.EXTENSION_ROWS}
    assert sizes["bioasq"]["icl"] == 10 and sizes["bioasq"]["test"] >= config["persistent"]["n_test"]


def test_every_hub_dataset_fixture_loads_through_the_datasets_call_of_a_paper_run(stand_ins, configs, tmp_path,
                                                                                monkeypatch):
    """The fixture of each dataset the paper config reads from the hub, laid out as a hub
    dataset repository (a README naming its config and split files), loads through
    `datasets.load_dataset(hub_id, config_name, split=..., revision=...)`, the call of a paper
    run under the installed `datasets`, into the same items as through its `path:`."""
    datasets = pytest.importorskip("datasets")
    from selfknow.stages.items import load_source

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # datasets reads its cache root at import, which an earlier test may have done: a run's
    # repositories share names and data_files with other runs', so a shared cache would serve them
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    config, _ = stand_ins
    # BFCL's files come by file download, not load_dataset (tests/test_tasks_bfcl.py)
    hub_sets = {n: s for n, s in configs[0]["datasets"].items() if "hub_id" in s and s["loader"] != "bfcl"}
    assert len(hub_sets) >= 17
    for name, paper in hub_sets.items():
        local = Path(config["datasets"][name]["path"])
        files = sorted(local.glob("*.parquet")) + sorted(local.glob("*.jsonl")) if local.is_dir() else [local]
        repo = tmp_path / name
        (repo / "data").mkdir(parents=True)
        entries = []
        for f in files:
            split = f.stem if local.is_dir() else "test"
            (repo / "data" / f"{split}{f.suffix}").write_bytes(f.read_bytes())
            entries.append(f"  - split: {split}\n    path: data/{split}{f.suffix}\n")
        (repo / "README.md").write_text(f"---\nconfigs:\n- config_name: {paper['config_name']}\n  data_files:\n"
                                        + "".join(entries) + "---\n", encoding="utf-8")
        spec = dict(config["datasets"][name])
        via_path = load_source(name, spec)
        del spec["path"]
        spec.update(hub_id=str(repo), config_name=paper["config_name"], revision=paper["revision"])
        pd.testing.assert_frame_equal(load_source(name, spec), via_path, obj=name)


_LOAD_ALL = """
import json, sys
import huggingface_hub
from selfknow.models import load_lm
out = {}
for m in json.loads(sys.argv[1]):
    for ck in m.get("checkpoints", [{"name": None}]):
        lm = load_lm(m, ck["name"], cache_dir=None)
        cfg = lm.model.config
        snapshot = huggingface_hub.snapshot_download(m["hub_id"], revision=ck.get("revision", "main"))
        out[f"{m['name']}/{ck['name']}"] = dict(
            architecture=type(lm.model).__name__, size=[cfg.num_hidden_layers, cfg.hidden_size],
            weight=float(next(lm.model.parameters()).flatten()[0]), snapshot=snapshot,
            chat=bool(m.get("chat")) and "<|assistant|>" in lm.render("hi", chat=True))
from selfknow.protocols.persistent.equivalence import NLIEquivalence
nli = NLIEquivalence(sys.argv[2])
out["nli"] = dict(architecture=type(nli._model).__name__ if nli.entail_index == 0 else None)
print(json.dumps(out))
"""


def test_hub_stand_ins_load_by_hub_id_and_revision_offline(stand_ins):
    """In a fresh process with the harness's environment (offline, the stand-in cache), every
    hf model loads by hub id and revision, as its own architecture class, each checkpoint with
    its own weights, resolved through the cache's refs/ to its snapshot."""
    config, cache = stand_ins
    models = [m for m in config["models"] if m["backend"] == "hf"]
    nli = config["persistent"]["equivalence"].removeprefix("nli:")
    run = subprocess.run([sys.executable, "-c", _LOAD_ALL, json.dumps(models), nli], env=environment(config, cache),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.splitlines()[-1])
    for m in models:
        for ck in m.get("checkpoints", [{"name": None, "revision": "main"}]):
            got = loaded[f"{m['name']}/{ck['name']}"]
            assert got["architecture"] == hub.ARCHITECTURES[m["hub_id"]][0] and got["size"] == [2, 32]
            assert Path(got["snapshot"]).name == hub.commit_of(m["hub_id"], ck["revision"])
            assert Path(got["snapshot"]).is_relative_to(cache)
            assert got["chat"] == bool(m.get("chat"))
    assert loaded.pop("nli")["architecture"] == hub.ARCHITECTURES[nli][0]
    assert len({v["weight"] for v in loaded.values()}) == len(loaded), "checkpoints must have their own weights"


_RELEASED_GCM = """
import json, sys
import numpy as np, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
from selfknow.models import load_lm
from selfknow.protocols.persistent.jobs import hub_snapshot
from selfknow.protocols.persistent.prompts import GCM_YES, released_gcm_prompt
spec, adapter, base_id = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
snapshot = hub_snapshot(adapter["hub_id"], adapter["revision"])
qa = [("Which planet is red?", "Mars"), ("[HISTORY] Who won?", "the Allies")]
prompts = [released_gcm_prompt(q, a) for q, a in qa]
ours = np.exp(load_lm(spec, None, cache_dir=None, adapter=snapshot).next_token_logprobs(prompts, [GCM_YES], chat=True)[:, 0])
plain = np.exp(load_lm(spec, None, cache_dir=None).next_token_logprobs(prompts, [GCM_YES], chat=True)[:, 0])
# the authors' read-out (conset/pred_confidence_gcm.py), written out independently
tok = AutoTokenizer.from_pretrained(base_id)
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_id), adapter["hub_id"],
                                  revision=adapter["revision"]).eval()
(yes,) = tok.encode("yes", add_special_tokens=False)
ref = []
for p in prompts:
    text = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True,
                                   enable_thinking=False)
    with torch.no_grad():
        logits = model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1]
    ref.append(float(torch.softmax(logits.float(), -1)[yes]))
print(json.dumps(dict(snapshot=snapshot, ours=ours.tolist(), plain=plain.tolist(), ref=ref)))
"""


def test_released_gcm_stand_in_loads_by_hub_id_and_scores_as_the_authors(stand_ins):
    """The paper config's released GCM (`persistent.gcm_adapter`) has a stand-in adapter in the
    hub cache layout on its backbone's stand-in; in a fresh offline process it resolves through
    refs/ to its snapshot, and our P("yes") read-out equals the authors' (peft from the hub id,
    the chat template with enable_thinking=False, softmax over the whole vocabulary)."""
    config, cache = stand_ins
    p = config["persistent"]
    (spec,) = [m for m in config["models"] if m["name"] == p["gcm_model"]]
    assert p["gcm_adapter"]["hub_id"] == "Hanqix/GCM-Qwen3-8B-TriviaQA"
    assert spec["chat_template_kwargs"] == {"enable_thinking": False}
    run = subprocess.run([sys.executable, "-c", _RELEASED_GCM, json.dumps(spec), json.dumps(p["gcm_adapter"]),
                          spec["hub_id"]], env=environment(config, cache), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert Path(got["snapshot"]).name == hub.commit_of(p["gcm_adapter"]["hub_id"], p["gcm_adapter"]["revision"])
    assert Path(got["snapshot"]).is_relative_to(cache)
    np.testing.assert_allclose(got["ours"], got["ref"], rtol=1e-5)
    assert all(0 < x < 1 for x in got["ours"]) and not np.allclose(got["ours"], got["plain"])


def test_store_writes_the_hub_cache_layout(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "config.json").write_text("{}")
    snap = hub.store(tmp_path / "hf", "org/name", "step10", files)
    repo = tmp_path / "hf" / "models--org--name"
    assert (repo / "refs" / "step10").read_text() == snap.name == hub.commit_of("org/name", "step10")
    assert (snap / "config.json").is_symlink() and (snap / "config.json").resolve().parent == repo / "blobs"
    sha = "5f0b02c75b57c5855da9ae460ce51323ea669d8a"
    assert hub.store(tmp_path / "hf", "org/name", sha, files).name == sha


# ---- the server -------------------------------------------------------------------------

@pytest.fixture
def server():
    s = StandInServer(["plain", "thinker", "lp"], reasoning=["thinker"])
    yield s
    s.close()


def _post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_server_refuses_what_a_reasoning_model_refuses_and_unknown_models(server):
    msg = [{"role": "user", "content": "Question?\nA. x\nB. y"}]
    code, body = _post(server, "/chat/completions", {"model": "thinker", "messages": msg, "max_tokens": 16})
    assert code == 400 and body["error"]["param"] == "max_tokens"
    code, body = _post(server, "/chat/completions", {"model": "thinker", "messages": msg, "temperature": 0,
                                                      "max_completion_tokens": 500})
    assert code == 400 and body["error"]["param"] == "temperature"
    # no room to reason: an empty answer cut at the limit
    code, body = _post(server, "/chat/completions", {"model": "thinker", "messages": msg, "max_completion_tokens": 16})
    assert code == 200 and body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["message"]["content"] == ""
    code, body = _post(server, "/chat/completions", {"model": "plain", "messages": msg, "max_tokens": 16, "temperature": 0})
    assert code == 200 and re.fullmatch(r"Answer: [AB]\nConfidence: [0-9.]+", body["choices"][0]["message"]["content"])
    assert _post(server, "/chat/completions", {"model": "nope", "messages": msg})[0] == 404


def test_server_answers_the_ladder_authors_format_in_whole_percentages(server):
    from selfknow.protocols.ladder.answering import format_choices, load_prompt, parse_authors_reply
    prompt = load_prompt("answer_mcq_authors").substitute(question="Q?", choices=format_choices(["x", "y", "z", "w"]))
    for seed in range(5):
        _, body = _post(server, "/chat/completions", {"model": "plain", "temperature": 0.3, "seed": seed,
                                                      "messages": [{"role": "user", "content": prompt}]})
        reply = body["choices"][0]["message"]["content"]
        assert re.fullmatch(r"Answer: [ABCD]\nConfidence: \d{1,3}", reply)
        assert parse_authors_reply(reply).status == "ok"


def test_server_answers_strict_schemas_and_logprobs(server):
    schema = {"type": "object", "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1},
                                               "a": {"type": "string", "enum": ["A", "B"]}},
              "required": ["p", "a"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
    _, body = _post(server, "/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "q"}],
                                                  "response_format": fmt})
    reply = json.loads(body["choices"][0]["message"]["content"])
    assert 0 <= reply["p"] <= 1 and reply["a"] in ("A", "B")
    loose = {**fmt, "json_schema": {**fmt["json_schema"], "strict": False}}
    assert _post(server, "/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "q"}],
                                               "response_format": loose})[0] == 400
    _, body = _post(server, "/chat/completions", {"model": "lp", "messages": [{"role": "user", "content": "q\nA. x\nB. y"}],
                                                  "logprobs": True, "top_logprobs": 5})
    top = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert len(top) == 5 and abs(sum(2.718281828 ** t["logprob"] for t in top)) <= 1.0 + 1e-9


def test_judge_stand_in_labels_paraphrases_and_refusals_are_counted(server):
    """Persistent correctness in the rehearsal comes from the judge: a candidate that is not an
    exact match can be labelled right, and refused (unparsable) judgments are counted."""
    spec = {"name": "judge", "backend": "openai", "base_url": server.url, "model": "plain", "max_retries": 0,
            "timeout_s": 10}
    lm = load_lm(spec, cache_dir=None)
    questions = [f"Which city is the capital of Kalo{k}?" for k in range(200)]
    cands = [["Kalomir", f"the city of Rendar {k}", "Vosdar"] for k in range(200)]
    verdicts = judge_candidates(lm, questions, [["Kalomir"]] * 200, cands, chat=True, labels="generate")
    ok = [v for v in verdicts if v.status == "ok"]
    assert all(v.labels[0] == "R" for v in ok)  # the exact match is always right
    assert any(v.labels[1] == "R" for v in ok)  # a non-exact answer the judge accepts
    assert any(v.labels[1] == "W" for v in ok)
    statuses = [v.status for v in verdicts]
    assert 0 < statuses.count("refused") < 20 and 0 < statuses.count("unparsable") < 20
    assert all(not any(v.correct) for v in verdicts if v.status != "ok")


def test_gpt_5_1_and_later_take_a_temperature_unless_asked_to_reason():
    s = StandInServer(["gpt-5.4"], reasoning=["gpt-5.4"])
    try:
        body = {"model": "gpt-5.4", "input": "q", "max_output_tokens": 16, "temperature": 0}
        assert _post(s, "/responses", body)[0] == 200  # no effort sent: GPT-5.4 reasons none
        code, err = _post(s, "/responses", {**body, "reasoning": {"effort": "medium"}})
        assert code == 400 and err["error"]["param"] == "temperature"
    finally:
        s.close()


_JUDGE_CLIENT = """
import json, sys
from selfknow.models import load_lm
from selfknow.stages.judge import judge_candidates
lm = load_lm(json.loads(sys.argv[1]), cache_dir=sys.argv[2])
v = judge_candidates(lm, ["Capital of Kalo?", "Capital of Rend?"], [["Kalomir"], ["Rendar"]],
                     [["Kalomir", "Vosdar"], ["Rendar"]], chat=True, labels="generate")
print(json.dumps([[x.status, list(x.labels)] for x in v]))
"""


def test_rehearsal_judge_batch_killed_mid_flight_resumes_without_resubmitting(configs, tmp_path):
    """The rehearsal's judge entry sends the authors' request (POST /v1/responses lines of one
    Batch API job: model, input, max_output_tokens max(4n+2, 16), temperature 0, nothing else),
    both candidate counts in one batch; a client killed while it waits resumes that batch."""
    from selfknow.config import model_entry

    s = StandInServer(["gpt-5.4"], reasoning=["gpt-5.4"])
    spec = {**model_entry(configs[1], configs[1]["judge"]["llm_judge"]), "base_url": s.url, "batch_poll_s": 0.05}
    run = [sys.executable, "-c", _JUDGE_CLIENT, json.dumps(spec), str(tmp_path / "cache")]
    env = {**environment(configs[1], tmp_path), "PYTHONPATH": str(ROOT / "src")}
    records = lambda: sorted((tmp_path / "cache-batches").glob("*.json"))  # noqa: E731
    s.batch_api.hold = {"batch_1"}
    try:
        kill_once_waiting(run, lambda: records() and s.batch_api.batches["batch_1"]["status"] == "in_progress",
                          env=env)
        s.batch_api.hold = set()
        out = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert len(s.batch_api.batches) == 1 and len(s.batch_api.files) == 2  # the input, the output
        lines = [json.loads(x) for x in s.batch_api.files["file-1"]["content"].decode().splitlines()]
        assert {x["url"] for x in lines} == {"/v1/responses"}
        assert sorted((x["body"]["max_output_tokens"], x["body"]["temperature"]) for x in lines) == [(16, 0.0), (16, 0.0)]
        assert all(set(x["body"]) == {"model", "input", "max_output_tokens", "temperature"} for x in lines)
        assert {x["body"]["model"] for x in lines} == {"gpt-5.4"}
        verdicts = json.loads(out.stdout.strip().splitlines()[-1])
        assert all(status in ("ok", "refused", "unparsable") for status, _ in verdicts)
        assert records() == []
    finally:
        s.close()


def test_lcae_stand_in_hedges_and_runs_past_the_budget_and_both_are_counted(server):
    """LCAE Stage 1 in the rehearsal: some ten-option answers are a hedge ("I am not sure.",
    once read as option I) and some reason past the token budget (cut at "length"); the
    Stage-1 records count them as unparsed and truncated, never as answers."""
    import pandas as pd

    from selfknow.protocols.lcae.examinees import answer_items

    spec = {"name": "examinee", "backend": "openai", "base_url": server.url, "model": "plain", "max_retries": 0,
            "timeout_s": 10}
    lm = load_lm(spec, cache_dir=None)
    items = pd.DataFrame({"item_id": [f"q{k}" for k in range(150)], "question": [f"Which drug {k}?" for k in range(150)],
                          "choices": [[f"drug {c}" for c in "ABCDEFGHIJ"]] * 150, "answer": ["I"] * 150})
    out = answer_items(lm, items, "cot", chat=True, max_new_tokens=256)
    counts = out["status"].value_counts()
    assert 0 < counts["unparsed"] < 25 and 0 < counts["truncated"] < 25 and counts["parsed"] > 100
    assert (out.loc[out["status"] == "unparsed", "raw"] == "I am not sure.").all()
    assert (out.loc[out["status"] == "truncated", "finish_reason"] == "length").all()
    assert out.loc[out["status"] != "parsed", "answer"].isna().all()


def test_api_endpoint_is_one_local_server(configs):
    port, models, reasoning = api_endpoint(configs[1])
    assert port == 18431 and "gpt-5.4" in reasoning and "qwen-max" in models and "qwen-max" not in reasoning


def test_a_second_rehearsal_serves_on_a_free_port_named_in_its_resolved_config(configs):
    """Two rehearsals on one machine: the second server cannot have the config's port, so it
    takes a free one, and the config its Snakemake reads points every API model there."""
    from selfknow.config import validate_config

    first = start_server(configs[1])
    try:
        second = start_server(configs[1])
        try:
            assert first.url != second.url
            for s in (first, second):
                with urllib.request.urlopen(s.url + "/models", timeout=10) as r:
                    assert "qwen-max" in {m["id"] for m in json.loads(r.read())["data"]}
            cfg = validate_config(resolved_config([ROOT / f for f in REHEARSAL], api_endpoint(configs[1])[0],
                                                  second.url))
            api = [m for m in cfg["models"] if m["backend"] == "openai"]
            assert api and {m["base_url"] for m in api} == {second.url}
            # nothing else changes
            assert [{k: v for k, v in m.items() if k != "base_url"} for m in cfg["models"]] == \
                [{k: v for k, v in m.items() if k != "base_url"} for m in configs[1]["models"]]
        finally:
            second.close()
    finally:
        first.close()


_SLEEPER = """
rule all_tables:
    params:
        pid=r"{pid}",
    shell:
        "echo $$ > {{params.pid}}.tmp && mv {{params.pid}}.tmp {{params.pid}} && exec sleep 600"
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_rehearse_stopped_by_a_signal_stops_snakemake_its_jobs_and_the_server(tmp_path, signum):
    """`selfknow rehearse` stopped as `timeout` (SIGTERM) or Ctrl-C (SIGINT) stops it leaves
    nothing running: the job Snakemake started, Snakemake and the stand-in server end with it.
    The job here is a sleep standing in for the workflow (`-- --snakefile`)."""
    pid = tmp_path / "job.pid"
    (tmp_path / "Snakefile").write_text(_SLEEPER.format(pid=pid))
    cmd = [sys.executable, "-m", "selfknow.cli", "rehearse", "--results", str(tmp_path / "results"), "--",
           "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path)]
    err = tmp_path / "stderr.txt"
    with err.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f)
    try:
        deadline = time.monotonic() + 600  # a first call builds the stand-ins
        while not pid.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pid.exists(), err.read_text()[-3000:]
        job = int(pid.read_text())
        url, resolved = re.search(r"stand-in API server on (\S+); config (\S+)", err.read_text()).groups()
        assert _alive(job) and Path(resolved).exists()
        proc.send_signal(signum)
        assert proc.wait(timeout=120) == 128 + signum, err.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not _alive(job), "the job Snakemake started outlived the rehearsal"
    assert not Path(resolved).exists()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/models", timeout=5)


# ---- end to end -------------------------------------------------------------------------

#: The suite's rehearsal runs the overlay with one persistent model, olmo3-7b, instead of two
#: (168 jobs instead of 231): every rule, table and figure of the paper config still runs, which
#: the test checks; marin-8b's stand-in loads by hub id and revision in
#: test_hub_stand_ins_load_by_hub_id_and_revision_offline, and its class, LlamaForCausalLM, runs
#: LADDER as llama-3-8b. SELFKNOW_REHEARSAL_FULL=1 runs the whole overlay.
SUITE_OVERRIDES = () if os.environ.get("SELFKNOW_REHEARSAL_FULL") == "1" else ("persistent={models: [olmo3-7b]}",)


@pytest.mark.slow
def test_rehearsal_builds_every_table_and_figure_of_the_paper_config(configs, tmp_path):
    results = tmp_path / "results"
    full, suite = _summary(REHEARSAL, str(tmp_path / "full")), _summary(REHEARSAL, str(results), *SUITE_OVERRIDES)
    assert set(suite.rule) == set(full.rule)
    start = time.monotonic()
    cmd = [sys.executable, "-m", "selfknow.cli", "rehearse", "--", "--config", f"results={results}", *SUITE_OVERRIDES]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30 * 60)
    minutes = (time.monotonic() - start) / 60
    assert run.returncode == 0, run.stderr[-5000:]
    targets = [f for f in suite.output_file if "/tables/" in f or "/figures/" in f]
    assert targets and [f for f in targets if not Path(f).exists()] == []
    # a time is reported, never asserted (tests do not time the machine they run on)
    print(f"the rehearsal took {minutes:.1f} minutes")


def test_a_split_without_questions_joins_the_other_split(tmp_path):
    """BioASQ has no train split, so the transfer dataset's train SC table is empty (found by
    the rehearsal): it must not turn the joined `correct` column into floats."""
    from selfknow.protocols.persistent.jobs import SC_COLUMNS, read_sc

    pd.DataFrame(columns=SC_COLUMNS).to_parquet(tmp_path / "train.parquet")
    test = pd.DataFrame({c: [None] for c in SC_COLUMNS}).assign(item_id="q1", correct=True, confidence=0.7)
    test.to_parquet(tmp_path / "test.parquet")
    both = pd.concat([read_sc(tmp_path / "train.parquet"), read_sc(tmp_path / "test.parquet")], ignore_index=True)
    assert both["correct"].dtype == bool and both["confidence"].dtype == float and both["correct"].tolist() == [True]


def test_the_judge_note_skips_a_split_without_questions():
    from selfknow.protocols.persistent.tables import judge_note

    cols = ["sc", "judge", "questions", "refused", "unparsable", "no candidates", "candidates", "R", "W", "N",
            "unlabelled"]
    counts = pd.DataFrame([["transfer__c1__train", None, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                           ["transfer__c1__test", "gpt-5.4", 80, 1, 2, 0, 240, 87, 134, 19, 0]], columns=cols)
    note = judge_note(counts)
    assert "LLM judge gpt-5.4 " in note and "on 80 questions: 1 refused, 2 unparsable" in note
