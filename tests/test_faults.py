"""Faults with real parts (issue #7, "faults"): a full disk and a read-only output directory
(real tmpfs mounts), a training job and a Snakemake generation job SIGKILLed mid-way and rerun
(byte-identical outputs, no lost or duplicated records), and unparsable outputs of a real model
counted, never dropped.

The misbehaving-API cases (429/500/timeouts, retries, the failure naming model and request) and
the corrupted cache entry are in test_models_openai.py and test_models_cache.py.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from selfknow.records import umask, write_csv, write_json, write_parquet, write_text

# ---- full disk, read-only directory -----------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(where: Path, options: str):
    """A real tmpfs mounted at `where` (needs root, as on CI); skips where mounting is refused."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); CI runs as root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _big_frame(n: int = 40_000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.random(n), "s": [f"row{i}" for i in range(n)]})


def test_full_disk_gives_clear_error_and_keeps_the_old_file(tmp_path):
    with _tmpfs(tmp_path / "small", "size=64k") as disk:
        out = disk / "out" / "table.parquet"
        write_parquet(_big_frame(10), out)  # a previous, complete version
        before = out.read_bytes()
        writers = [(write_parquet, _big_frame(), out), (write_csv, _big_frame(), disk / "out" / "table.csv"),
                   (write_json, {"x": list(range(40_000))}, disk / "out" / "table.json"),
                   (write_text, "y" * 200_000, disk / "out" / "table.txt")]
        for writer, obj, target in writers:
            with pytest.raises(OSError) as info:
                writer(obj, target)
            assert info.value.errno == errno.ENOSPC
            assert f"cannot write {target}" in str(info.value)
        # nothing half-written: no temporary file, no new file, the old version intact
        assert sorted(p.name for p in (disk / "out").iterdir()) == ["table.parquet"]
        assert out.read_bytes() == before
        # once space is free the same call succeeds
        write_parquet(_big_frame(100), out)
        assert len(pd.read_parquet(out)) == 100


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o027, 0o077])
def test_outputs_get_the_mode_the_umask_gives(tmp_path, mask):
    """Atomic writes go through a private temporary file; the output still gets 0666 less the
    umask, as a plain open() would give it (group-readable results on a cluster)."""
    old = os.umask(mask)
    try:
        assert umask() == mask
        write_text("x", tmp_path / "a.txt")
        write_parquet(pd.DataFrame({"a": [1]}), tmp_path / "deep" / "b.parquet")
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("x")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "a.txt", tmp_path / "deep" / "b.parquet",
                                                        tmp_path / "plain.txt")}
    assert set(modes.values()) == {0o666 & ~mask}, modes


def test_read_only_output_directory_gives_clear_error(tmp_path):
    with _tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        for target in (ro / "table.parquet", ro / "new" / "sub" / "table.parquet"):
            with pytest.raises(OSError) as info:
                write_parquet(_big_frame(10), target)
            assert info.value.errno == errno.EROFS
            assert f"cannot write {target}" in str(info.value)
        assert list(ro.iterdir()) == []


def test_resumable_generation_on_a_full_disk_resumes_after_space_is_freed(tmp_path):
    from selfknow.resumable import map_chunks

    items = pd.DataFrame({"item_id": [f"i{k}" for k in range(60)], "x": range(60)})
    calls = []

    def fn(chunk):
        calls.append(chunk["item_id"].iloc[0])
        # each record carries ~4 KB so that the 64 KB disk fills after a few chunks
        return chunk.assign(y=[os.urandom(2048).hex() for _ in range(len(chunk))])

    with _tmpfs(tmp_path / "small", "size=64k") as disk:
        out = disk / "gen.parquet"
        with pytest.raises(OSError, match=re.escape(f"cannot write {disk}/gen.parquet.parts/")):
            map_chunks(items, fn, out, chunk_size=3)
        assert not out.exists()
        parts = sorted((disk / "gen.parquet.parts").iterdir())
        assert parts and not any(p.name.endswith(".tmp") for p in parts)
        done = len([p for p in parts if p.suffix == ".parquet"])  # beside them: the run's identity stamp
        # free the space by moving the run to a bigger disk, parts and all
        big = tmp_path / "big"
        big.mkdir()
        subprocess.run(["cp", "-r", str(disk / "gen.parquet.parts"), str(big)], check=True)
    calls.clear()
    res = map_chunks(items, fn, big / "gen.parquet", chunk_size=3)
    assert len(calls) == 20 - done  # the finished chunks were not recomputed
    assert list(res["item_id"]) == list(items["item_id"])  # none lost, none duplicated


# ---- a training job killed mid-way ------------------------------------------------------------

WORLD = {"seed": 3, "n_domains": 5, "entities_per_domain": 12, "n_phases": 3,
         "intro_probs": [0.6, 0.2, 0.2], "rewrite_rate": 0.3, "rare_rate": 0.3,
         "mcq_practice_per_phase": 20}
#: 40 steps a phase: enough work after the first checkpoint that the kill (0.09 s after it) still
#: lands mid-run on an idle machine, where 6 steps a phase finished first
FAMILY = {"seed": 5, "vocab_size": 320, "n_layer": 1, "n_embd": 16, "n_head": 2, "seq_len": 64,
          "batch_size": 4, "epochs_per_phase": 20, "max_steps_per_phase": 40, "warmup_steps": 2}


def _train_cmd(world: Path, out: Path) -> list[str]:
    code = (f"from selfknow.world.trainer import train_family; "
            f"train_family({str(world)!r}, {FAMILY!r}, {str(out)!r})")
    return [sys.executable, "-c", code]


def _tree_digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def _kill_when(proc: subprocess.Popen, ready, delay: float, timeout: float = 240) -> None:
    """SIGKILL `proc` `delay` seconds after `ready()` first holds; fails if it finished first."""
    end = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the job finished (rc {proc.returncode}) before it could be killed")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("the job never reached the kill point")
        time.sleep(0.02)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.slow
def test_killed_training_reruns_to_byte_identical_checkpoints(tmp_path):
    from selfknow.world.generator import generate_world
    from selfknow.world.trainer import checkpoint_name, train_family

    world = tmp_path / "world"
    generate_world(WORLD, world)
    clean = tmp_path / "clean"
    train_family(world, FAMILY, clean)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(world, killed), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    delay = float(np.random.default_rng(7).uniform(0.0, 0.15))  # a seeded "random point"
    _kill_when(proc, lambda: (killed / checkpoint_name(0)).is_dir(), delay)
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "family.json").exists(), "the kill came after the job had finished"
    assert not (killed / checkpoint_name(2)).exists()

    # the rerun trains from scratch into the same directory
    subprocess.run(_train_cmd(world, killed), check=True, capture_output=True)
    a, b = _tree_digest(clean), _tree_digest(killed)
    # train_log.csv carries per-step CPU seconds; every other file must be byte-identical
    a.pop("train_log.csv"), b.pop("train_log.csv")
    assert a == b
    assert sorted(p.name for p in killed.iterdir() if p.is_dir()) == [checkpoint_name(p) for p in range(3)]
    assert not [p for p in killed.iterdir() if p.name.startswith(".")]  # no half-saved checkpoint
    la, lb = (pd.read_csv(d / "train_log.csv").drop(columns="seconds") for d in (clean, killed))
    pd.testing.assert_frame_equal(la, lb)
    # every step once: none lost, none duplicated
    assert list(lb["step"]) == list(range(1, 3 * FAMILY["max_steps_per_phase"] + 1))


# ---- a Snakemake generation job killed mid-way --------------------------------------------------


def _tiny_model(out: Path) -> Path:
    """A random 1-layer GPT-2 with a byte-level tokenizer: fast, deterministic greedy answers
    on the world's prompts (its context fits the 5-shot prompts)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from selfknow.world.trainer import train_tokenizer

    tok = train_tokenizer(["Question: Answer: the of is a"] * 10, 300)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=2048, n_embd=32, n_layer=1, n_head=2,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.eos_token_id, initializer_range=0.5)
    GPT2LMHeadModel(cfg).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _generation_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """world_qa-style test/train item files with more than one chunk (256) of test items."""
    from selfknow.world.generator import generate_world

    world = tmp_path / "world"
    generate_world({**WORLD, "entities_per_domain": 45}, world)
    qa = pd.read_parquet(world / "qa.parquet")
    test, train = tmp_path / "test.parquet", tmp_path / "train.parquet"
    qa[qa["split"] == "test"].to_parquet(test)
    qa[qa["split"] == "train"].to_parquet(train)
    return test, train


def _greedy_cmd(test: Path, train: Path, model: Path, out: Path) -> list[str]:
    spec = {"name": "tiny", "backend": "hf", "path": str(model)}
    code = textwrap.dedent(f"""
        import json
        from selfknow.stages.jobs import greedy_job
        s = greedy_job({str(test)!r}, {str(train)!r}, {spec!r}, "final", {str(out)!r}, n_shots=2, n_items=0,
                       seed=0, max_new_tokens=4, cache_dir=None)
        print(json.dumps(s))
    """)
    return [sys.executable, "-c", code]


@pytest.mark.slow
def test_killed_generation_job_reruns_to_identical_output(tmp_path):
    """The greedy generation job (what the workflow's generate_greedy rule runs) SIGKILLed
    after its first finished chunk, rerun: the same bytes as an uninterrupted run, and the
    finished chunk was not recomputed."""
    import json

    test, train = _generation_inputs(tmp_path)
    n_items = len(pd.read_parquet(test))
    assert n_items > 256  # more than one chunk of the greedy job
    model = _tiny_model(tmp_path / "tiny")
    clean, killed = tmp_path / "clean" / "gen.parquet", tmp_path / "killed" / "gen.parquet"
    parts = killed.with_name(killed.name + ".parts")
    proc = subprocess.Popen(_greedy_cmd(test, train, model, killed), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _kill_when(proc, lambda: parts.is_dir() and any(p.suffix == ".parquet" for p in parts.iterdir()), 0.0)
    assert proc.returncode == -signal.SIGKILL and not killed.exists()
    n_done = len([p for p in parts.iterdir() if p.suffix == ".parquet"])
    rerun = subprocess.run(_greedy_cmd(test, train, model, killed), capture_output=True, text=True, check=True)
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["items"] == n_items
    full = subprocess.run(_greedy_cmd(test, train, model, clean), capture_output=True, text=True, check=True)
    calls = json.loads(full.stdout.strip().splitlines()[-1])["model_calls"]
    # the finished chunks were read back, not recomputed (calls count distinct prompts)
    assert 0 < summary["model_calls"] <= n_items - 256 * n_done < calls
    assert killed.read_bytes() == clean.read_bytes()
    res = pd.read_parquet(killed)
    assert res["item_id"].is_unique and list(res["item_id"]) == list(pd.read_parquet(test)["item_id"])
    assert not parts.exists()


def _workflow_config(tmp_path: Path, model_dir: Path, results: Path) -> Path:
    """config/test.yaml plus the tiny model; only `results` differs between runs."""
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    cfg["models"].append({"name": "tiny", "backend": "hf", "path": str(model_dir)})
    # enough world_qa test items (6 domains x 60 x 3 relations, 80 % test, one domain held
    # out: ~720) for three generation chunks of 256, so the kill lands between chunks
    cfg["world"]["generator"] = {**(cfg["world"].get("generator") or {}), "entities_per_domain": 60}
    cfg["results"] = str(results)
    path = tmp_path / f"config-{results.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake_cmd(configfile: Path, target: Path) -> list[str]:
    # --nolock: a SIGKILLed snakemake leaves its lock in the repo's .snakemake/, which would
    # stop the rerun (and `--unlock` would drop the locks of other runs in this checkout)
    return [sys.executable, "-m", "snakemake", "--configfile", str(configfile), "--cores", "1",
            "--nolock", "--rerun-incomplete", str(target)]


@pytest.mark.slow
def test_killed_snakemake_generation_job_reruns_to_identical_output(tmp_path):
    """DEPENDS ON config/test.yaml validating and on the workflow's generate_greedy rule
    (rules/generate.smk, scripts/run_job.py, selfknow.stages.jobs.greedy_job): the test adds
    one `hf` model (a random tiny GPT-2) to that config and runs only its greedy generation of
    world_qa, killed after its first finished chunk, then rerun, against a clean run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    model = _tiny_model(tmp_path / "tiny")
    outs = {}
    for name in ("clean", "killed"):
        results = tmp_path / name / "results"
        cfg = _workflow_config(tmp_path, model, results)
        target = results / "generations" / "tiny" / "final" / "greedy" / "world_qa.parquet"
        cmd = _snakemake_cmd(cfg, target)
        if name == "killed":
            parts = target.with_name(target.name + ".parts")
            # start_new_session: the kill takes snakemake and its job script down together
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)

            def ready():
                return parts.is_dir() and any(p.suffix == ".parquet" for p in parts.iterdir())

            try:
                _kill_when(proc, ready, 0.0)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            assert not target.exists(), "the job finished before the kill"
            n_parts = len([p for p in parts.iterdir() if p.suffix == ".parquet"])
            assert n_parts >= 1
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        outs[name] = target
    a, b = (pd.read_parquet(outs[k]) for k in ("clean", "killed"))
    assert b["item_id"].is_unique and len(b) == len(a) > 256  # several chunks, none lost or duplicated
    assert outs["clean"].read_bytes() == outs["killed"].read_bytes()
    assert not outs["killed"].with_name(outs["killed"].name + ".parts").exists()


# ---- unparsable model outputs: counted, never dropped ------------------------------------------


@pytest.fixture(scope="module")
def smollm2(request):
    from model_fixtures import smollm2_hf_dir

    from selfknow.models import load_lm

    import torch

    torch.set_num_threads(1)
    path = smollm2_hf_dir(Path(request.config.cache.mkdir("selfknow-models")))
    return load_lm({"name": "smollm2", "backend": "hf", "path": str(path), "chat": True, "dtype": "float32"},
                   None, cache_dir=None)


@pytest.mark.slow
def test_lcae_stage1_counts_unparsed_smollm2_replies(smollm2):
    from selfknow.protocols.lcae.examinees import answer_items

    items = pd.DataFrame({
        "item_id": ["a", "b", "c"],
        "question": ["Which planet is known as the Red Planet?", "What is 7 times 6?",
                     "Which gas do plants absorb from the air?"],
        "choices": [["Venus", "Mars", "Jupiter", "Saturn"], ["42", "36", "48", "13"],
                    ["Oxygen", "Nitrogen", "Carbon dioxide", "Helium"]],
        "answer": ["B", "A", "C"],
    })
    # three new tokens: the generated-knowledge reply ("Knowledge: ...") never reaches a letter
    out = answer_items(smollm2, items, "knowledge", chat=True, max_new_tokens=3)
    assert list(out["item_id"]) == ["a", "b", "c"]  # every row kept, in order
    # three tokens never reach "Answer: X": every reply is cut, none is read as an answer
    assert list(out["status"]) == ["truncated"] * 3 and set(out["finish_reason"]) == {"length"}
    assert not out["correct"].any()  # a reply with no answer is scored wrong
    assert out["answer"].isna().all()


@pytest.mark.slow
def test_llm_judge_job_keeps_and_counts_every_smollm2_judgment(smollm2, tmp_path, monkeypatch):
    import selfknow.stages.jobs as jobs
    from selfknow.stages.judge import parse_labels

    test = pd.DataFrame({"item_id": ["q1", "q2", "q3"], "question": ["Capital of France?", "2 + 2?", "Colour of grass?"],
                         "answer": ["Paris", "4", "green"], "aliases": [["Paris"], ["4", "four"], ["green"]]})
    gens = pd.DataFrame({"model": "m", "checkpoint": "final", "item_id": ["q1", "q2", "q3"],
                         "answer": ["Paris", "banana", None], "correct": [True, False, False]})
    test.to_parquet(tmp_path / "test.parquet")
    gens.to_parquet(tmp_path / "gen.parquet")
    monkeypatch.setattr(jobs, "load_lm", lambda spec, ckpt, cache_dir: smollm2)
    summary = jobs.llm_judge_job([str(tmp_path / "gen.parquet")], str(tmp_path / "test.parquet"),
                                 {"name": "smollm2", "backend": "hf", "chat": True}, str(tmp_path / "judged.parquet"),
                                 n_items=3, seed=0, cache_dir=None, label_modes=["generate", "constrained"],
                                 multi_reference=False)
    judged = pd.read_parquet(tmp_path / "judged.parquet")
    gen, con = judged[judged["labels"] == "generate"], judged[judged["labels"] == "constrained"]
    assert len(gen) == len(con) == 3 and sorted(gen["item_id"]) == ["q1", "q2", "q3"]  # none dropped
    assert [x if isinstance(x, str) else None for x in gen["judge_label"]] == [parse_labels(t, 1)[0]
                                                                               for t in gen["judge_reply"]]
    assert summary["unparsable_generate"] + summary["refused_generate"] == int((gen["judge_status"] != "ok").sum())
    assert not gen.loc[gen["judge_status"] != "ok", "judge_correct"].any()  # counted wrong, as N
    # constrained: exactly one label token per answer, always parsed
    assert set(con["judge_status"]) == {"ok"} and set(con["judge_label"]) <= {"R", "W", "N"}


# ---- SIGTERM (Snakemake cancelling a job, scancel) ---------------------------------------------


def test_sigterm_unwinds_a_job_so_its_scratch_files_are_removed(tmp_path):
    """A job that SIGTERM stops runs its `finally` blocks (the multi-checkpoint training's
    scratch weights, a half-written temporary output) and logs the failure, exit code 143."""
    scratch, log = tmp_path / "scratch", tmp_path / "job.log"
    code = textwrap.dedent(f"""
        import os, sys, tempfile, time
        from selfknow.runlog import job_log
        with job_log({str(log)!r}, "job"):
            os.mkdir({str(scratch)!r})
            try:
                print("ready", flush=True, file=sys.__stdout__)
                time.sleep(60)
            finally:
                os.rmdir({str(scratch)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert scratch.is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not scratch.exists()
    assert "job failed after" in log.read_text()


@pytest.mark.slow
def test_a_killed_snakemake_resumes_as_the_docs_say(shared_data, tmp_path):
    """A SIGKILLed Snakemake leaves its lock: the same command is refused until the documented
    `snakemake --unlock` (docs/running.md, "When something fails"), after which it reruns the
    job it left incomplete. The run works in a directory of its own (`--directory`), so its
    lock and the unlock touch no other run of this checkout."""
    sessions = shared_data / "ladder-selfbound" / "sessions"
    if not sessions.is_dir():
        pytest.skip("ladder-selfbound data absent")
    assert "snakemake --unlock --configfile CONFIG" in (REPO / "docs" / "running.md").read_text()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    work, results = tmp_path / "work", tmp_path / "results"
    work.mkdir()
    target = results / "tables" / "ladder" / "import_aggregates.csv"
    flags = ["-s", str(REPO / "Snakefile"), "-d", str(work), "--configfile", str(REPO / "config.yaml"),
             "--cores", "1"]
    config = ["--config", f"results={results}", f"ladder_import_dir={sessions}"]
    cmd = [sys.executable, "-m", "snakemake", *flags]
    proc = subprocess.Popen([*cmd, str(target), *config], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    log = results / "logs" / "ladder" / "import.log"
    try:
        _kill_when(proc, log.exists, 0.5)  # the job runs, under the run's lock
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert not target.exists() and any((work / ".snakemake" / "locks").iterdir())
    again = subprocess.run([*cmd, str(target), *config], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "cannot be locked" in again.stdout + again.stderr
    unlock = subprocess.run([*cmd, "--unlock", *config], env=env, capture_output=True, text=True, timeout=300)
    assert unlock.returncode == 0, unlock.stderr[-3000:]
    rerun = subprocess.run([*cmd, "--rerun-incomplete", str(target), *config], env=env, capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert len(pd.read_csv(target)) == 45  # 5 models x the importer's 9 estimators
