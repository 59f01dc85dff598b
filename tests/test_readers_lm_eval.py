"""The lm-evaluation-harness reader on real sample logs: `lm_eval --log_samples` runs offline on
two tiny local GPT-2 checkpoints and a local multiple-choice and generation task; the logs are
read into plain records and evaluated with the persistent-calibration metrics."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax

from model_fixtures import build_tiny_gpt2
from selfknow.cli import main
from selfknow.readers import read_records
from selfknow.readers.lm_eval import MC_METRIC
from selfknow.stats.classification import brier
from selfknow.stats.persistent.contrast import contrast_pairs, persistent_metrics, pivot_long

# (question, options, index of the right one): words the tiny tokenizer knows
MC_ITEMS = [
    ("which colour is the sky?", ["blue", "red", "green"], 0),
    ("what is two plus two?", ["3", "4", "5"], 1),
    ("what did the dog eat?", ["the mat", "the song", "the bone"], 2),
    ("where did the cat sit?", ["on the mat", "on the bone"], 0),
    ("what did the bird sing?", ["a bone", "a song", "a mat"], 1),
    ("which is the capital of France?", ["Berlin", "Paris"], 1),
    ("which is the capital of Germany?", ["Berlin", "Paris"], 0),
    ("which letter comes first?", ["D", "C", "B", "A"], 3),
    ("which digit is largest?", ["9", "1", "0"], 0),
    ("what sat on the mat?", ["the dog", "the cat", "the bird"], 1),
    ("what ate the bone?", ["the dog", "the cat"], 0),
    ("which is a colour?", ["song", "blue", "bone"], 1),
    ("what is the answer?", ["A", "B", "C", "D"], 2),
    ("which digit is smallest?", ["7", "8", "0", "9"], 2),
    ("what sang a song?", ["the mat", "the bird"], 1),
    ("which is a city?", ["Paris", "France", "Germany"], 0),
]
GEN_ITEMS = [("what is two plus two?", "4"), ("which colour is the sky?", "blue"),
             ("where did the cat sit?", "on the mat"), ("what did the dog eat?", "the bone"),
             ("which is the capital of France?", "Paris"), ("which letter comes first?", "A")]

MC_YAML = """\
task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: choices
doc_to_target: label
metric_list:
  - metric: acc
  - metric: acc_norm
"""
GEN_YAML = """\
task: tiny_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: answer
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
  do_sample: false
process_results: !function tiny_utils.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
  - metric: length_confidence
    aggregation: mean
    higher_is_better: true
"""
# a researcher's own confidence for a generation, logged by the task's process_results
GEN_UTILS = """\
def process_results(doc, results):
    answer = results[0].strip()
    return {"exact_match": float(answer == doc["answer"]), "length_confidence": 1.0 / (1.0 + len(answer))}
"""


def _write_tasks(root: Path) -> Path:
    tasks = root / "tasks"
    tasks.mkdir()
    mc = root / "mc.jsonl"
    mc.write_text("".join(json.dumps({"question": q, "choices": c, "label": y}) + "\n" for q, c, y in MC_ITEMS))
    gen = root / "gen.jsonl"
    gen.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in GEN_ITEMS))
    (tasks / "tiny_mc.yaml").write_text(MC_YAML.format(data=mc))
    (tasks / "tiny_gen.yaml").write_text(GEN_YAML.format(data=gen))
    (tasks / "tiny_utils.py").write_text(GEN_UTILS)
    return tasks


def _run_lm_eval(model: Path, tasks: Path, out: Path, home: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(home), "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
           "--tasks", "tiny_mc,tiny_gen", "--include_path", str(tasks), "--output_path", str(out),
           "--log_samples", "--device", "cpu", "--batch_size", "8"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"lm_eval failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")


@pytest.fixture(scope="module")
def lm_eval_runs(tmp_path_factory) -> tuple[Path, list[Path]]:
    """lm_eval's output directory holding one run per checkpoint, and the checkpoints (two
    lm_eval processes, ~25 s each on an idle 2-core machine: the tests using them are slow)."""
    root = tmp_path_factory.mktemp("lm_eval")
    tasks = _write_tasks(root)
    out = root / "out"
    models = [build_tiny_gpt2(root / f"step-{k}", seed=k) for k in (1, 2)]
    for model in models:
        _run_lm_eval(model, tasks, out, root / "hf_home")
    return out, models


def _results(out: Path, model: Path) -> dict:
    [path] = [p for p in out.rglob("results_*.json") if json.loads(p.read_text())["model_name"] == str(model)]
    return json.loads(path.read_text())


def _samples_file(out: Path, model: Path, task: str) -> Path:
    results = next(p for p in out.rglob("results_*.json") if json.loads(p.read_text())["model_name"] == str(model))
    return results.with_name(results.name.replace("results_", f"samples_{task}_").replace(".json", ".jsonl"))


@pytest.mark.slow
def test_multiple_choice_records_match_the_log_and_its_aggregates(lm_eval_runs):
    out, models = lm_eval_runs
    records = read_records(out, "lm-eval", tasks=["tiny_mc"], methods=list(MC_METRIC))
    assert list(records.columns) == ["item", "checkpoint", "method", "correct", "confidence", "dataset"]
    assert set(records.checkpoint) == {str(m) for m in models}
    assert set(records.method) == {"option-likelihood", "option-likelihood-norm"}
    assert set(records.dataset) == {"tiny_mc"}
    for model in models:
        results = _results(out, model)["results"]["tiny_mc"]
        samples = {s["doc_id"]: s for s in map(json.loads, _samples_file(out, model, "tiny_mc").read_text().splitlines())}
        for method, metric in (("option-likelihood", "acc"), ("option-likelihood-norm", "acc_norm")):
            mine = records[(records.checkpoint == str(model)) & (records.method == method)].set_index("item")
            assert sorted(mine.index) == sorted(str(i) for i in range(len(MC_ITEMS)))
            # correctness: lm-eval's own aggregate is the mean of the per-sample metric
            assert mine.correct.mean() == pytest.approx(results[f"{metric},none"], abs=1e-12)
            for doc_id, (_, options, _) in enumerate(MC_ITEMS):
                lls = np.array([float(r[0]) for r in samples[doc_id]["filtered_resps"]])
                # option lengths from the dataset itself, not from the log's requests
                scores = lls if metric == "acc" else lls / np.array([len(o) for o in options])
                assert mine.loc[str(doc_id), "confidence"] == pytest.approx(softmax(scores).max(), rel=1e-12)


@pytest.mark.slow
def test_two_checkpoints_evaluate_end_to_end(lm_eval_runs):
    out, models = lm_eval_runs
    records = read_records(out, "lm-eval", tasks=["tiny_mc"], methods=list(MC_METRIC))
    order = [str(m) for m in models]
    for method, group in records.groupby("method"):
        correct, labels, items = pivot_long(group.checkpoint, group["item"], group.correct, order)
        conf, _, _ = pivot_long(group.checkpoint, group["item"], group.confidence, order)
        assert contrast_pairs(correct), f"{method}: the two checkpoints agree on every question"
        metrics = persistent_metrics(conf, correct)
        assert all(math.isfinite(v) for v in metrics.values()), (method, metrics)
        assert metrics["full_brier"] == pytest.approx(brier(conf.ravel(), correct.ravel()))
        assert metrics["full_brier"] == pytest.approx(float(np.mean((conf - correct) ** 2)))


@pytest.mark.slow
def test_generation_task_needs_a_named_confidence_field(lm_eval_runs):
    out, models = lm_eval_runs
    with pytest.raises(ValueError, match=r"configs\.tiny_gen: a generation task logs no confidence; pass confidence_field"):
        read_records(out, "lm-eval", tasks=["tiny_gen"])
    records = read_records(out, "lm-eval", tasks=["tiny_gen"], confidence_field="length_confidence")
    assert set(records.method) == {"length_confidence"}
    for model in models:
        samples = [json.loads(ln) for ln in _samples_file(out, model, "tiny_gen").read_text().splitlines()]
        mine = records[records.checkpoint == str(model)].set_index("item")
        assert len(mine) == len(GEN_ITEMS)
        for s in samples:
            answer = s["filtered_resps"][0].strip()
            assert mine.loc[str(s["doc_id"]), "confidence"] == pytest.approx(1 / (1 + len(answer)))
            assert mine.loc[str(s["doc_id"]), "correct"] == int(answer == GEN_ITEMS[s["doc_id"]][1])


@pytest.mark.slow
def test_one_samples_file_reads_its_task_with_the_results_beside_it(lm_eval_runs, tmp_path):
    out, models = lm_eval_runs
    samples = _samples_file(out, models[0], "tiny_mc")
    records = read_records(samples, "lm-eval", checkpoint="step-1", methods=list(MC_METRIC))
    assert set(records.checkpoint) == {"step-1"} and len(records) == 2 * len(MC_ITEMS)
    alone = tmp_path / samples.name
    shutil.copy(samples, alone)
    with pytest.raises(ValueError, match=r"results_.*\.json \(task configuration, model name\) is not beside it"):
        read_records(alone, "lm-eval")


def _corrupt(out: Path, model: Path, tmp_path: Path, line: int, edit) -> Path:
    """A copy of one run with sample `line` (1-based) of tiny_mc edited; -> the copied samples file."""
    samples = _samples_file(out, model, "tiny_mc")
    run = tmp_path / "run"
    shutil.copytree(samples.parent, run)
    copy = run / samples.name
    lines = copy.read_text().splitlines()
    sample = json.loads(lines[line - 1])
    edit(sample)
    lines[line - 1] = json.dumps(sample)
    copy.write_text("\n".join(lines) + "\n")
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("edit, message", [
    (lambda s: s.pop("acc"), r"field 'acc' is missing"),
    (lambda s: s.update(acc=0.5), r"field 'acc' must be 0 or 1"),
    (lambda s: s.update(filtered_resps="oops"), r"field 'filtered_resps' must list one \[log-likelihood, is_greedy\]"),
    (lambda s: s.update(acc=1 - s["acc"]), r"field 'acc' is \d but option \d has the highest log-likelihood"),
    (lambda s: s["arguments"].popitem(), r"\d options in 'arguments' but \d log-likelihoods"),
])
def test_malformed_sample_names_file_line_and_field(lm_eval_runs, tmp_path, edit, message):
    out, models = lm_eval_runs
    bad = _corrupt(out, models[0], tmp_path, 3, edit)
    with pytest.raises(ValueError, match=rf"{bad}:3: {message}"):
        read_records(bad, "lm-eval", methods=["option-likelihood"])


@pytest.mark.slow
def test_malformed_json_line_names_file_and_line(lm_eval_runs, tmp_path):
    out, models = lm_eval_runs
    bad = _corrupt(out, models[0], tmp_path, 2, lambda s: None)
    lines = bad.read_text().splitlines()
    lines[1] = lines[1][:-5]
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{bad}: line 2: invalid JSON"):
        read_records(bad, "lm-eval")


def _write_run(root: Path, samples: list[dict], output_type: str = "multiple_choice") -> Path:
    """A hand-written run in lm-eval's layout (for hand-computed cases)."""
    date = "2026-01-01T00-00-00.000000"
    (root / f"results_{date}.json").write_text(json.dumps(
        {"model_name": "m", "configs": {"t": {"output_type": output_type, "target_delimiter": " "}}}))
    (root / f"samples_t_{date}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return root


def test_hand_computed_option_confidences(tmp_path):
    # options " ab", " b", " abc" (lengths 2, 1, 3 without the delimiter), log-likelihoods -1, -2, -3:
    #   raw:  softmax(-1, -2, -3) at option 0 = 1 / (1 + e^-1 + e^-2) = 0.665241
    #   norm: scores -0.5, -2, -1 -> option 0, 1 / (1 + e^-1.5 + e^-0.5) = 0.546549
    sample = {"doc_id": 0, "target": "0", "filter": "none", "acc": 1.0, "acc_norm": 1.0,
              "arguments": {f"gen_args_{i}": {"arg_0": "Q:", "arg_1": o} for i, o in enumerate([" ab", " b", " abc"])},
              "filtered_resps": [["-1.0", "False"], ["-2.0", "False"], ["-3.0", "False"]]}
    records = read_records(_write_run(tmp_path, [sample]), "lm-eval", methods=list(MC_METRIC)).set_index("method")
    assert records.loc["option-likelihood", "confidence"] == pytest.approx(0.665241, abs=1e-6)
    assert records.loc["option-likelihood-norm", "confidence"] == pytest.approx(0.546549, abs=1e-6)
    assert records.correct.tolist() == [1, 1]


def test_same_model_twice_needs_labels(tmp_path):
    sample = {"doc_id": 0, "target": "1", "acc": 0.0, "arguments": {"gen_args_0": {"arg_0": "Q:", "arg_1": " a"},
                                                                   "gen_args_1": {"arg_0": "Q:", "arg_1": " b"}},
              "filtered_resps": [["-1.0", "False"], ["-2.0", "False"]]}
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        _write_run(tmp_path / run, [sample])
    with pytest.raises(ValueError, match=r"two records for one .* 'm', 'option-likelihood'.*give each run its own checkpoint"):
        read_records(tmp_path, "lm-eval")


def test_several_filters_need_one_named(tmp_path):
    def sample(flt, acc):
        return {"doc_id": 0, "target": "0", "filter": flt, "acc": acc,
                "arguments": {"gen_args_0": {"arg_0": "Q:", "arg_1": " a"}, "gen_args_1": {"arg_0": "Q:", "arg_1": " b"}},
                "filtered_resps": [["-1.0", "False"], ["-2.0", "False"]] if acc else [["-2.0", "False"], ["-1.0", "False"]]}
    run = _write_run(tmp_path, [sample("strict", 1.0), sample("loose", 0.0)])
    with pytest.raises(ValueError, match=r"samples of several filters \['loose', 'strict'\]; pass filter="):
        read_records(run, "lm-eval")
    assert read_records(run, "lm-eval", filter="loose").correct.tolist() == [0]
    with pytest.raises(ValueError, match=r"no samples of filter 'none'; logged: \['loose', 'strict'\]"):
        read_records(run, "lm-eval", filter="none")


def test_unknown_format_and_method_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"unknown record format 'helm'"):
        read_records(tmp_path, "helm")
    with pytest.raises(ValueError, match=r"unknown lm-eval method 'p-true'"):
        read_records(tmp_path, "lm-eval", methods=["p-true"])
    with pytest.raises(ValueError, match=r"no lm-eval results_<date>.json under this directory"):
        read_records(tmp_path, "lm-eval")


def test_generation_confidence_field_must_be_a_probability(tmp_path):
    samples = [{"doc_id": 0, "filter": "none", "exact_match": True, "conf": 0.25},
               {"doc_id": 1, "filter": "none", "exact_match": 0.0, "conf": "high"}]
    run = _write_run(tmp_path, samples, output_type="generate_until")
    with pytest.raises(ValueError, match=r"samples_t_.*\.jsonl:2: field 'conf' must be a number in \[0, 1\], got 'high'"):
        read_records(run, "lm-eval", confidence_field="conf")
    with pytest.raises(ValueError, match=r"samples_t_.*\.jsonl:1: field 'em' is missing"):
        read_records(run, "lm-eval", confidence_field="conf", metric="em")


def test_multiple_choice_reads_one_method_by_default_and_names_the_other(tmp_path):
    """acc and acc_norm may pick different options: by default one method (acc's), the other
    named in a note; an error of the evaluation names the file."""
    sample = {"doc_id": 0, "target": "0", "filter": "none", "acc": 1.0, "acc_norm": 1.0,
              "arguments": {f"gen_args_{i}": {"arg_0": "Q:", "arg_1": o} for i, o in enumerate([" ab", " b", " abc"])},
              "filtered_resps": [["-1.0", "False"], ["-2.0", "False"], ["-3.0", "False"]]}
    records = read_records(_write_run(tmp_path, [sample]), "lm-eval")
    assert records.method.tolist() == ["option-likelihood"]
    assert records.attrs["notes"] == ["task t: read one method of the several it logged; not read: "
                                      "option-likelihood-norm (choose with methods=, --methods)"]
    assert records.attrs["source"] == str(tmp_path) and records.index[0].endswith(".jsonl:1")
    only_norm = {k: v for k, v in sample.items() if k != "acc"}
    other = tmp_path / "norm"
    other.mkdir()
    assert read_records(_write_run(other, [only_norm]), "lm-eval").method.tolist() == ["option-likelihood-norm"]


def test_checkpoints_are_relabelled_and_ordered_by_name_or_last_path_component(tmp_path):
    sample = {"doc_id": 0, "target": "0", "acc": 1.0, "arguments": {"gen_args_0": {"arg_0": "Q:", "arg_1": " a"},
                                                                  "gen_args_1": {"arg_0": "Q:", "arg_1": " b"}},
              "filtered_resps": [["-1.0", "False"], ["-2.0", "False"]]}
    for run, name in (("a", "/ckpt/step-2000"), ("b", "/ckpt/step-1000")):
        (tmp_path / run).mkdir()
        _write_run(tmp_path / run, [sample])
        results = next((tmp_path / run).glob("results_*.json"))
        results.write_text(json.dumps({**json.loads(results.read_text()), "model_name": name}))
    records = read_records(tmp_path, "lm-eval", checkpoints=["step-1000=early", "/ckpt/step-2000=late"])
    assert records.checkpoint.tolist() == ["early", "late"]
    with pytest.raises(ValueError, match=rf"{tmp_path}: checkpoints \['/ckpt/step-1000'\] are not named"):
        read_records(tmp_path, "lm-eval", checkpoints=["step-2000"])
    with pytest.raises(ValueError, match=r"checkpoint 'step-3000' matches none of the logged checkpoints"):
        read_records(tmp_path, "lm-eval", checkpoints=["step-3000", "step-1000", "step-2000"])


@pytest.mark.slow
def test_persistent_eval_reads_an_lm_eval_output_from_the_command_line(lm_eval_runs, tmp_path):
    """A researcher's lm-eval output (two checkpoints, a multiple-choice and a generation task
    with its own confidence) evaluated by the command alone, checkpoints named in order."""
    out, models = lm_eval_runs
    cmd = [str(Path(sys.executable).with_name("selfknow")), "persistent-eval", str(out), str(tmp_path / "eval"), "--format", "lm-eval",
           "--checkpoints", "step-1,step-2", "--confidence-field", "length_confidence",
           "--min-contrast", "1", "--bootstrap", "20", "--bootstrap-ece", "0", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert f"{2 * len(MC_ITEMS) + 2 * len(GEN_ITEMS)} records (tiny_gen, tiny_mc)" in proc.stdout
    assert "not read: option-likelihood-norm" in proc.stderr
    table = (tmp_path / "eval" / "table1.csv").read_text()
    assert "option-likelihood" in table and "length_confidence" in table
    metrics = __import__("pandas").read_csv(tmp_path / "eval" / "metrics.csv")
    assert set(metrics["method"]) == {"option-likelihood", "length_confidence"}


def _mixed_run(root: Path) -> Path:
    """One run with a multiple-choice task `mc` (acc and acc_norm logged) and a generation task
    `gen` whose process_results logs `length_confidence`, two questions each."""
    date = "2026-01-01T00-00-00.000000"
    configs = {"mc": {"output_type": "multiple_choice", "target_delimiter": " "},
               "gen": {"output_type": "generate_until"}}
    (root / f"results_{date}.json").write_text(json.dumps({"model_name": "m", "configs": configs}))
    mc = [{"doc_id": i, "target": "0", "acc": 1.0, "acc_norm": 1.0,
           "arguments": {f"gen_args_{j}": {"arg_0": "Q:", "arg_1": o} for j, o in enumerate([" ab", " b"])},
           "filtered_resps": [["-1.0", "False"], ["-2.0", "False"]]} for i in range(2)]
    gen = [{"doc_id": i, "exact_match": i, "length_confidence": 0.25 * (i + 1)} for i in range(2)]
    for task, samples in (("mc", mc), ("gen", gen)):
        (root / f"samples_{task}_{date}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return root


def test_listed_methods_keep_the_generation_tasks_confidence_field(tmp_path):
    """--methods option-likelihood-norm --confidence-field length_confidence: the generation
    task's records stay (they were dropped); the field may also be listed among the methods."""
    run = _mixed_run(tmp_path)
    got = read_records(run, "lm-eval", methods=["option-likelihood-norm"], confidence_field="length_confidence")
    assert got[["dataset", "method"]].value_counts().to_dict() == {("mc", "option-likelihood-norm"): 2,
                                                                   ("gen", "length_confidence"): 2}
    assert got.loc[got.dataset == "gen", "confidence"].tolist() == [0.25, 0.5]
    both = read_records(run, "lm-eval", methods=["length_confidence", "option-likelihood"],
                        confidence_field="length_confidence")
    assert both.method.tolist() == ["length_confidence"] * 2 + ["option-likelihood"] * 2
    only = read_records(run, "lm-eval", methods=["length_confidence"], confidence_field="length_confidence")
    assert set(only.method) == {"length_confidence"} and len(only) == 2
    with pytest.raises(ValueError, match=r"unknown lm-eval method 'length_confidence'.*--confidence-field "
                                         r"length_confidence"):
        read_records(run, "lm-eval", methods=["length_confidence"])


def test_records_of_one_checkpoint_stop_naming_the_checkpoints_option(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    run, out = _mixed_run(tmp_path / "run"), tmp_path / "eval"
    assert main(["persistent-eval", str(run), str(out), "--format", "lm-eval", "--confidence-field",
                 "length_confidence", "--min-contrast", "1", "--bootstrap", "5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "hold one evaluation checkpoint ('m')" in err and "--checkpoints" in err, err
    assert not out.exists()
    plain = tmp_path / "plain.csv"
    plain.write_text("item,checkpoint,method,correct,confidence\nq0,c1,p,1,0.9\nq1,c1,p,0,0.2\n")
    assert main(["persistent-eval", str(plain), str(out), "--min-contrast", "1", "--bootstrap", "5", "--quiet"]) == 2
    assert "hold one evaluation checkpoint ('c1')" in capsys.readouterr().err
