"""The disk request cache: keys, per-request hits/misses, reruns with zero model calls,
corrupt entries, and several processes writing at once (SPEC §0.4)."""
from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import os

import pytest

from selfknow.models.base import CallStats
from selfknow.models.cache import CachedCalls, RequestCache, canonical_json, request_key

IDENTITY = {"backend": "hf", "model_id": "m", "revision": "r1", "adapter": None}


class CountingBackend:
    """A stand-in model: answers are a function of the payload, every computed request is
    recorded, so a test can count real model calls."""

    def __init__(self, cache_dir, identity=IDENTITY):
        self.stats = CallStats()
        self.calls = CachedCalls(cache_dir, lambda: dict(identity), self.stats)
        self.computed: list[str] = []

    def generate(self, prompts, **params):
        def compute(idx):
            self.computed.extend(prompts[i] for i in idx)
            return [{"text": prompts[i].upper(), "lp": -math.inf if i == 0 else -1.5}
                    for i in idx]

        return self.calls.run("generate", [{"prompt": p} for p in prompts], params, compute)


def test_key_is_canonical_and_sensitive_to_every_field():
    base = {**IDENTITY, "call": "generate", "payload": {"prompt": "p"},
            "params": {"max_new_tokens": 5, "stop": ["\n"]}, "sample_index": 0}
    reordered = dict(reversed(list(base.items())))
    assert request_key(base) == request_key(reordered)
    variants = [
        {"backend": "openai"}, {"model_id": "m2"}, {"revision": "r2"},
        {"adapter": {"path": "/a", "sha256": "0" * 64}}, {"call": "beam_search"},
        {"payload": {"prompt": "q"}}, {"params": {"max_new_tokens": 6, "stop": ["\n"]}},
        {"sample_index": 1},
    ]
    keys = {request_key({**base, **v}) for v in variants}
    assert len(keys) == len(variants) and request_key(base) not in keys
    assert canonical_json({"b": 1.0, "a": [float("-inf")]}) == \
        '{"a":[{"__float__":"-inf"}],"b":1.0}'


def test_hits_misses_and_rerun_makes_zero_calls(tmp_path):
    lm = CountingBackend(tmp_path)
    out = lm.generate(["a", "b", "a"], max_new_tokens=3)
    assert [o["text"] for o in out] == ["A", "B", "A"]
    assert lm.computed == ["a", "b"]  # the duplicate inside the batch is computed once
    assert (lm.stats.hits, lm.stats.misses) == (1, 2)
    # half the batch cached: only the misses are computed
    out2 = lm.generate(["b", "c", "d", "a"], max_new_tokens=3)
    assert lm.computed == ["a", "b", "c", "d"]
    assert (lm.stats.hits, lm.stats.misses) == (3, 4)
    assert out2[0] == out[1] and out[0]["lp"] == -math.inf
    # a fresh process (new object) over the same dir: zero model calls
    rerun = CountingBackend(tmp_path)
    assert rerun.generate(["a", "b", "c", "d"], max_new_tokens=3) == \
        lm.generate(["a", "b", "c", "d"], max_new_tokens=3)
    assert rerun.computed == [] and rerun.stats.misses == 0 and rerun.stats.hits == 4
    # other decoding parameters or another revision: misses
    assert CountingBackend(tmp_path).generate(["a"], max_new_tokens=4) and True
    other = CountingBackend(tmp_path, {**IDENTITY, "revision": "r2"})
    other.generate(["a"], max_new_tokens=3)
    assert other.computed == ["a"]


def test_sample_index_separates_sampled_calls_only(tmp_path):
    stats = CallStats()
    calls = CachedCalls(tmp_path, lambda: dict(IDENTITY), stats)

    def run(temperature, k):
        return calls.run("generate", [{"prompt": "p"}], {"temperature": temperature},
                         lambda idx: [{"text": f"t={temperature} k={k}"}], sample_index=k)

    assert run(0.0, 0) == run(0.0, 3)  # greedy repeats share one entry
    assert run(0.7, 1) != run(0.7, 2)  # sampled repeats do not
    assert (stats.misses, stats.hits) == (3, 1)


def test_cache_entries_get_the_mode_the_umask_gives(tmp_path):
    old = os.umask(0o027)
    try:
        CountingBackend(tmp_path).generate(["a", "b"], max_new_tokens=3)
    finally:
        os.umask(old)
    entries = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(entries) == 2 and all(p.stat().st_mode & 0o777 == 0o640 for p in entries)


def test_no_cache_dir_computes_every_time(tmp_path):
    lm = CountingBackend(None)
    lm.generate(["a"], max_new_tokens=1)
    lm.generate(["a"], max_new_tokens=1)
    assert lm.computed == ["a", "a"] and lm.stats.misses == 2
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["truncate", "garbage", "edit_response", "wrong_key"])
def test_corrupt_entry_is_logged_and_recomputed(tmp_path, caplog, damage):
    lm = CountingBackend(tmp_path)
    lm.generate(["a", "b"], max_new_tokens=1)
    files = sorted(tmp_path.rglob("*.json"))
    assert len(files) == 2
    key_a = request_key({**IDENTITY, "call": "generate", "payload": {"prompt": "a"},
                         "params": {"max_new_tokens": 1}, "sample_index": 0})
    path = tmp_path / key_a[:2] / f"{key_a}.json"
    raw = path.read_text()
    if damage == "truncate":
        path.write_text(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff" * 10)
    elif damage == "edit_response":
        path.write_text(raw.replace('"text":"A"', '"text":"Z"'))
    else:
        entry = json.loads(raw)
        entry["key"] = "0" * 64
        path.write_text(json.dumps(entry))
    rerun = CountingBackend(tmp_path)
    with caplog.at_level(logging.WARNING, logger="selfknow.models.cache"):
        out = rerun.generate(["a", "b"], max_new_tokens=1)
    assert [o["text"] for o in out] == ["A", "B"]
    assert rerun.computed == ["a"] and rerun.stats.hits == 1
    assert "corrupt entry" in caplog.text and key_a in caplog.text
    assert RequestCache(tmp_path).get(key_a) == (True, {"text": "A", "lp": -math.inf})


def _writer(cache_dir: str, worker: int, n: int, queue) -> None:
    lm = CountingBackend(cache_dir)
    # every worker writes the same shared prompts (in a different order) and its own ones
    shared = [f"shared-{i}" for i in range(n)]
    if worker % 2:
        shared = shared[::-1]
    own = [f"w{worker}-{i}" for i in range(n)]
    for i in range(0, n, 5):
        lm.generate(shared[i:i + 5] + own[i:i + 5], max_new_tokens=2)
    queue.put((worker, lm.stats.hits, lm.stats.misses))


def test_concurrent_writers_same_and_different_keys(tmp_path):
    n, workers = 40, 4
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, n, queue))
             for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * workers
    results = [queue.get(timeout=5) for _ in procs]
    assert all(h + m == 2 * n for _, h, m in results)
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == n + workers * n  # shared keys once, own keys per worker
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left behind
    rerun = CountingBackend(tmp_path)
    prompts = [f"shared-{i}" for i in range(n)] + [f"w{w}-{i}" for w in range(workers)
                                                   for i in range(n)]
    out = rerun.generate(prompts, max_new_tokens=2)
    assert rerun.computed == [] and [o["text"] for o in out] == [p.upper() for p in prompts]


def test_hf_identity_fingerprint_changes_with_weights(tmp_path):
    from selfknow.models.cache import hash_files

    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"a" * 5000)
    (d / ".tmpfile").write_bytes(b"ignored")
    h1 = hash_files(d, sample_bytes=1000)
    (d / ".tmpfile").write_bytes(b"still ignored")
    assert hash_files(d, sample_bytes=1000) == h1
    (d / "model.safetensors").write_bytes(b"a" * 4999 + b"b")  # last byte: sampled
    assert hash_files(d, sample_bytes=1000) != h1
    # a change in the unsampled middle is seen only by the full hash (used for adapters)
    full, sampled = hash_files(d), hash_files(d, sample_bytes=1000)
    (d / "model.safetensors").write_bytes(b"a" * 2000 + b"c" + b"a" * 2998 + b"b")
    assert hash_files(d, sample_bytes=1000) == sampled and hash_files(d) != full


class SamplingChatLM:
    """A chat model behind the real request cache whose every computed request is a fresh
    draw (a counter): an API model at temperature > 0, or, with `deterministic`, local greedy
    decoding. Routing prompts answer "Fast"; every other reply is an assessment JSON."""

    backend, model_id, revision, adapter = "scripted", "m", None, None
    token_budgets: dict = {}

    def __init__(self, cache_dir, *, deterministic: bool):
        from selfknow.models.base import LM

        self.budget = LM.budget.__get__(self)
        self.stats = CallStats()
        self._calls = CachedCalls(cache_dir, lambda: dict(IDENTITY), self.stats,
                                  greedy_deterministic=deterministic)
        self.draws = 0

    def generate(self, prompts, *, max_new_tokens, stop=None, chat=False, system=None, temperature=0.0,
                 sample_index=0, json_schemas=None):
        from selfknow.models.base import Generation

        def compute(idx):
            out = []
            for i in idx:
                self.draws += 1
                text = "Fast" if "Fast or Slow" in prompts[i] else (
                    json.dumps({"error_probability": self.draws / 1000, "final_answer": "A"}))
                out.append({"text": text, "tokens_in": 1, "tokens_out": 1, "finish_reason": "stop"})
            return out

        got = self._calls.run("generate", [{"prompt": p} for p in prompts],
                              {"max_new_tokens": max_new_tokens, "temperature": float(temperature)}, compute,
                              sample_index=sample_index)
        return [Generation(**g) for g in got]


@pytest.mark.parametrize("temperature,deterministic,shared", [(0.7, False, False), (0.7, True, False),
                                                              (0.0, True, True)])
def test_lcae_dpr_fast_draws_are_not_the_baselines(tmp_path, temperature, deterministic, shared):
    """Issue 24's DPR-fast case: a Fast-routed DPR assessment prompt is byte-identical to the
    baseline's. Sampled (temperature 0.7, cold cache), each of the 12 DPR-fast rows (4 items x 3
    repeats) is its own draw, not the baseline's reply; greedy on a deterministic backend the
    identical requests still share one entry."""
    import pandas as pd

    from selfknow.protocols.lcae.metacognition import assess

    items = pd.DataFrame({"item_id": list("abcd"), "question": [f"Q {k}?" for k in "abcd"],
                          "choices": [["x", "y", "z"]] * 4, "answer": ["A"] * 4})
    stage1 = pd.DataFrame({"item_id": list("abcd"), "answer": ["A", "B", "A", "C"]})
    lm = SamplingChatLM(tmp_path / "cache", deterministic=deterministic)
    out = {(c, r): assess(lm, items, stage1, c, dict.fromkeys("abcd", 0.4), chat=True, repeat=r,
                          temperature=temperature)
           for c in ("baseline", "dpr") for r in range(3)}
    assert all((out["dpr", r]["mode"] == "fast").all() for r in range(3))
    same = sum(int(b == d) for r in range(3)
               for b, d in zip(out["baseline", r]["error_p"], out["dpr", r]["error_p"]))
    assert same == (12 if shared else 0)
