"""The rehearsal (`selfknow rehearse`, config/rehearsal.yaml over config/paper.yaml): the
stand-ins load through the real paths, the server keeps the API rules, the rehearsal config
cannot drift from the paper config, and (slow) the whole rehearsal builds every table and
figure of the paper config."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfknow.stages.items import build_items
from selfknow.protocols.ladder.heldout import react_records
from selfknow.stages.judge import judge_candidates
from selfknow.models import load_lm
from selfknow.rehearsal import data, hub
from selfknow.rehearsal.harness import api_endpoint, build_stand_ins, environment, load_config
from selfknow.rehearsal.server import StandInServer

ROOT = Path(__file__).resolve().parents[1]
PAPER = ("config/paper.yaml",)
REHEARSAL = ("config/paper.yaml", "config/rehearsal.yaml")
#: what the rehearsal may change: sizes, and where resources come from (`path`, `models`)
SIZE_KEYS = {
    "results", "models",
    "datasets.*.path", "datasets.*.possible_answer_path", "datasets.*.train_range", "datasets.*.test_range",
    "judge.audit_items", "judge.audit_bootstrap",
    "persistent.models", "persistent.n_train", "persistent.n_test", "persistent.min_contrast",
    "persistent.min_contrast_transfer", "persistent.num_beams", "persistent.max_new_tokens", "persistent.seeds",
    "persistent.bootstrap_replicates", "persistent.variance_seeds", "persistent.variance_items",
    "persistent.bootstrap_ece_replicates",
    "ladder.models", "ladder.n_sessions", "ladder.n_turns", "ladder.llm_user_sessions", "ladder.session_bootstrap",
    "ladder.cluster_bootstrap", "ladder.items_per_domain", "ladder.lsa_query_sessions", "ladder.noise_repeats",
    "ladder.random_partitions", "ladder.extension.models",
    *(f"ladder.extension.{t}.{k}" for t in ("gsm8k", "humaneval", "bfcl") for k in ("n_items", "max_new_tokens")),
    "ladder.cross_task.models", "ladder.cross_task.items_per_domain", "ladder.cross_task.max_new_tokens",
    "lcae.n_items", "lcae.examinee_models", "lcae.repeats", "lcae.max_new_tokens",
}
#: model entry keys that are about the machine (devices, memory, concurrency), not the protocol
MACHINE_KEYS = {"params_b", "dtype", "device", "gpu", "base_url", "max_concurrency", "mem_mb", "batch_size"}


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
    paper = {m["name"]: m for m in configs[0]["models"]}
    for m in configs[1]["models"]:
        ref = paper[m["name"]]
        for key in (ref.keys() | m.keys()) - MACHINE_KEYS - {"checkpoints"}:
            assert m.get(key) == ref.get(key), (m["name"], key)
        assert all(c in ref.get("checkpoints", []) for c in m.get("checkpoints", [])), m["name"]


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


def _summary(configfiles, results: str) -> pd.DataFrame:
    out = subprocess.run([sys.executable, "-m", "snakemake", "all_tables", "--summary", "--configfile", *configfiles,
                          "--config", f"results={results}"], cwd=ROOT, capture_output=True, text=True, check=True)
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
        if spec["loader"] == "react":  # recorded trajectories, not items: Table 34 reads them itself
            records, zero_shot = react_records(name, spec)
            sizes[name] = (len(records), len(zero_shot))
            continue
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
    assert sizes["react"] == (80, 8)  # 2 configurations x 4 subjects x 10 questions; one prior per subject
    assert sizes["bioasq"]["icl"] == 10 and sizes["bioasq"]["test"] >= config["persistent"]["n_test"]


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


def test_api_endpoint_is_one_local_server(configs):
    port, models, reasoning = api_endpoint(configs[1])
    assert port == 18431 and "gpt-5.4" in reasoning and "qwen-max" in models and "qwen-max" not in reasoning


# ---- end to end -------------------------------------------------------------------------

@pytest.mark.slow
def test_rehearsal_builds_every_table_and_figure_of_the_paper_config(configs, tmp_path):
    results = tmp_path / "results"
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "selfknow.cli", "rehearse", "--results", str(results)], cwd=ROOT,
                         capture_output=True, text=True, timeout=30 * 60)
    minutes = (time.monotonic() - start) / 60
    assert run.returncode == 0, run.stderr[-5000:]
    expected = _summary(REHEARSAL, str(results))
    targets = [f for f in expected.output_file if "/tables/" in f or "/figures/" in f]
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
