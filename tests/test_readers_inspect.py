"""The inspect_ai reader on real logs: `inspect eval` runs a small task offline on two tiny local
GPT-2 checkpoints (its `hf` provider, output log-probabilities on), writing one `.eval` and one
`.json` log; the logs are read into plain records and evaluated with the persistent metrics."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from model_fixtures import build_tiny_gpt2
from selfknow.readers import read_records
from selfknow.stats.persistent.contrast import contrast_pairs, persistent_metrics, pivot_long

# two `inspect eval` processes, ~25 s each on an idle 2-core machine
pytestmark = pytest.mark.slow

# targets a tiny random model's 4-token answers contain some of the time (single letters often,
# words rarely), so that both checkpoints have right and wrong answers
QUESTIONS = [
    ("what is two plus two?", "4"), ("which colour is the sky?", "e"), ("where did the cat sit?", "a"),
    ("what did the dog eat?", "bone"), ("which is the capital of France?", "t"), ("what did the bird sing?", "o"),
    ("which letter comes first?", "A"), ("what sat on the mat?", "cat"), ("which digit is largest?", "s"),
    ("which is a colour?", "blue"), ("what ate the bone?", "n"), ("which is a city?", "Paris"),
    ("what is the answer?", "h"), ("which digit is smallest?", "0"), ("what sang a song?", "i"),
    ("where is Berlin?", "Germany"),
]

TASK = '''\
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

QUESTIONS = {questions!r}


@task
def tiny_qa():
    samples = [Sample(id=f"q{{i}}", input=f"Question: {{q}}\\nAnswer:", target=t) for i, (q, t) in enumerate(QUESTIONS)]
    return Task(dataset=MemoryDataset(samples), solver=generate(), scorer=includes())
'''


def _checkpoint(path: Path, seed: int) -> Path:
    """A tiny GPT-2 whose tokenizer carries a plain chat template (inspect's hf provider
    formats every prompt with one)."""
    from transformers import AutoTokenizer

    build_tiny_gpt2(path, seed=seed)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(path)
    return path


def _inspect_eval(task: Path, name: str, model: Path, log_dir: Path, fmt: str, home: Path) -> None:
    """`inspect eval` with greedy decoding: the hf provider logs the top-1 token's log-probability
    at each step, which is the emitted token's only when it does not sample."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(home),
           "TOKENIZERS_PARALLELISM": "false", "INSPECT_LOG_DIR": str(log_dir)}
    cmd = [sys.executable, "-m", "inspect_ai", "eval", task.name, "--model", f"hf/{name}",
           "-M", f"model_path={model}", "-M", "device=cpu", "-M", "do_sample=false", "--logprobs", "--max-tokens", "4", "--seed", "0",
           "--log-dir", str(log_dir), "--log-format", fmt, "--display", "none", "--max-connections", "1"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=task.parent)
    if proc.returncode != 0:
        raise AssertionError(f"inspect eval failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")


@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory) -> Path:
    """A log directory with one `.eval` log (checkpoint step-1) and one `.json` log (step-2)."""
    root = tmp_path_factory.mktemp("inspect")
    task = root / "tiny_task.py"
    task.write_text(TASK.format(questions=QUESTIONS))
    logs = root / "logs"
    for k, fmt in ((1, "eval"), (2, "json")):
        _inspect_eval(task, f"step-{k}", _checkpoint(root / f"step-{k}", seed=k), logs, fmt, root / "hf_home")
    return logs


def _log_files(logs: Path) -> dict[str, Path]:
    return {p.suffix: p for p in logs.iterdir() if p.suffix in (".eval", ".json") and p.name != "logs.json"}


def _raw_samples(path: Path) -> list[dict]:
    """The samples as stored, read without inspect_ai: a .json log's `samples`, or the
    samples/*.json members of a .eval zip."""
    if path.suffix == ".json":
        return json.loads(path.read_text())["samples"]
    with zipfile.ZipFile(path) as z:
        return [json.loads(z.read(n)) for n in z.namelist() if n.startswith("samples/") and n.endswith(".json")]


def test_records_match_the_stored_samples(inspect_logs):
    records = read_records(inspect_logs, "inspect")
    assert list(records.columns) == ["item", "checkpoint", "method", "correct", "confidence", "dataset"]
    assert set(records.checkpoint) == {"hf/step-1", "hf/step-2"}
    assert set(records.method) == {"sequence-prob"} and set(records.dataset) == {"tiny_qa"}
    files = _log_files(inspect_logs)
    assert set(files) == {".eval", ".json"}
    for path in files.values():
        samples = _raw_samples(path)
        assert len(samples) == len(QUESTIONS)
        label = {p.suffix: c for p, c in ((files[".eval"], "hf/step-1"), (files[".json"], "hf/step-2"))}[path.suffix]
        mine = records[records.checkpoint == label].set_index("item")
        for s in samples:
            [score] = s["scores"].values()
            text = s["output"]["choices"][0]["message"]["content"]
            target = dict(QUESTIONS)[s["input"].removeprefix("Question: ").removesuffix("\nAnswer:")]
            # includes(): C when the target occurs in the answer (case-insensitively)
            assert score["value"] == ("C" if target.lower() in str(text).lower() else "I")
            assert mine.loc[s["id"], "correct"] == (score["value"] == "C")
            logprobs = [t["logprob"] for t in s["output"]["choices"][0]["logprobs"]["content"]]
            assert mine.loc[s["id"], "confidence"] == pytest.approx(math.exp(sum(logprobs)), rel=1e-12)


def test_two_checkpoints_evaluate_end_to_end(inspect_logs):
    records = read_records(inspect_logs, "inspect")
    correct, labels, items = pivot_long(records.checkpoint, records["item"], records.correct)
    conf, _, _ = pivot_long(records.checkpoint, records["item"], records.confidence)
    metrics = persistent_metrics(conf, correct)
    assert all(math.isfinite(metrics[m]) for m in ("full_auc", "full_brier", "full_ece"))
    assert metrics["full_brier"] == pytest.approx(float(np.mean((conf - correct) ** 2)))
    # greedy decoding makes the answers, and so the contrast set, the same on every run
    assert contrast_pairs(correct), "the two checkpoints agree on every question"
    assert all(math.isfinite(v) for v in metrics.values()), metrics


def test_options_and_errors(inspect_logs):
    files = _log_files(inspect_logs)
    one = read_records(files[".json"], "inspect", checkpoint="step-2")
    assert set(one.checkpoint) == {"step-2"} and len(one) == len(QUESTIONS)
    with pytest.raises(ValueError, match=r"sample 'q0' \(epoch 1\): field 'scores.match' is missing \(scorers: \['includes'\]\)"):
        read_records(files[".json"], "inspect", scorer="match")
    with pytest.raises(ValueError, match=r"field 'scores.includes.value' must be a number in \[0, 1\] to serve as confidence, got '[CI]'"):
        read_records(files[".json"], "inspect", confidence="score:includes")


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["output"]["choices"][0].update(logprobs=None),
     r"field 'output.choices\[0\].logprobs' is absent; run the eval with --logprobs"),
    (lambda s: s["scores"]["includes"].update(value="P"),
     r"field 'scores.includes.value' must be 'C', 'I', 0 or 1 to serve as correctness, got 'P'"),
])
def test_malformed_sample_names_file_sample_and_field(inspect_logs, tmp_path, edit, message):
    log = json.loads(_log_files(inspect_logs)[".json"].read_text())
    edit(next(s for s in log["samples"] if s["id"] == "q2"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(log))
    with pytest.raises(ValueError, match=rf"{bad}: sample 'q2' \(epoch 1\): {message}"):
        read_records(bad, "inspect")
