"""`selfknow plan`: request counts against hand-computed small configs and a real tiny run."""
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from selfknow.cli import main
from selfknow.config import ConfigError, load_config, model_spec, validate_config
from selfknow.plan import make_plan
from selfknow.records import write_parquet

ROOT = Path(__file__).resolve().parents[1]


def _items(n: int, split: str, mcq: bool) -> pd.DataFrame:
    return pd.DataFrame({
        "item_id": [f"{split}{i}" for i in range(n)], "dataset": "d", "domain": "x",
        "question": [f"{split} question number {i}?" for i in range(n)],
        "choices": [["red", "green", "blue", "black"] if mcq else None for _ in range(n)],
        "answer": ["A" if mcq else f"answer {i}" for i in range(n)], "aliases": [[] for _ in range(n)],
        "split": split})


def _write_items(results: Path, name: str, n_train: int, n_test: int, mcq: bool) -> None:
    for split, n in (("train", n_train), ("test", n_test)):
        write_parquet(_items(n, split, mcq), results / "items" / name / f"{split}.parquet")


def _config(cfg: dict, where: Path) -> Path:
    """`cfg` written as a config file (the plan reads it as Snakemake does)."""
    path = where / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _row(df: pd.DataFrame, model: str, stage: str) -> pd.Series:
    rows = df[(df["model"] == model) & (df["stage"] == stage)]
    assert len(rows) == 1, (model, stage, df[["model", "stage"]].to_dict("records"))
    return rows.iloc[0]


@pytest.fixture
def lcae_config(tmp_path):
    results = tmp_path / "results"
    _write_items(results, "mc", 2, 5, mcq=True)
    return _config({
        "seed": 1, "results": str(results),
        "models": [
            {"name": "chat", "backend": "hf", "hub_id": "org/chat", "chat": True, "gpu": 2, "throughput_tok_s": 1000},
            {"name": "base", "backend": "hf", "hub_id": "org/base"},
            {"name": "api", "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}],
        "datasets": {"mc": {"loader": "mmlu", "path": str(tmp_path), "subjects": ["x"], "subject_range": [0, 5]}},
        "lcae": {"dataset": "mc", "n_items": 3, "strategies": ["standard", "cot"],
                 "examinee_models": ["chat", "base", "api"], "repeats": 2, "conditions": ["baseline", "ids"],
                 "max_new_tokens": 32, "prices": {"api": [1.0, 2.0], "chat": [5.0, 5.0]}}}, tmp_path)


def test_lcae_requests_by_hand(lcae_config):
    df, basis = make_plan(lcae_config)
    assert basis == {"mc": "items on disk"}
    # 3 items x 2 strategies, one generated answer each
    assert _row(df, "chat", "lcae_stage1")["requests"] == 6
    assert _row(df, "api", "lcae_stage1")["requests"] == 6
    # standard: 3 items x 4 options; cot: 3 recalls + 3 x 4 options after them
    assert _row(df, "base", "lcae_stage1")["requests"] == 12 + 3 + 12
    # 2 conditions x 3 items; greedy local decoding shares the 2 repeats, an API model does not
    assert _row(df, "chat", "lcae_stage2")["requests"] == 6
    assert _row(df, "api", "lcae_stage2")["requests"] == 12
    # a base model ("calibrated") scores the 4 options of the 2 train items for its calibration
    # map and the 3 items' options after the IDS signal; Baseline's are Stage 1's Standard ones
    assert _row(df, "base", "lcae_stage2")["requests"] == 2 * 4 + 3 * 4
    # with "digits" it reads 10 digit log-likelihoods per item and condition, repeats shared
    cfg = yaml.safe_load(lcae_config.read_text())
    cfg["lcae"]["base_error_p"] = "digits"
    (lcae_config.parent / "digits").mkdir()
    df, _ = make_plan(_config(cfg, lcae_config.parent / "digits"))
    assert _row(df, "base", "lcae_stage2")["requests"] == 2 * 3 * 10


def test_tokens_dollars_and_hours(lcae_config):
    df, _ = make_plan(lcae_config)
    api1, api2 = _row(df, "api", "lcae_stage1"), _row(df, "api", "lcae_stage2")
    # completion tokens are the budgets: lcae.max_new_tokens in Stage 1, 64 in Stage 2
    assert api1["completion_tokens"] == 6 * 32 and api2["completion_tokens"] == 12 * 64
    assert api1["usd"] == pytest.approx((api1["prompt_tokens"] * 1.0 + api1["completion_tokens"] * 2.0) / 1e6)
    assert api1["prompt_tokens"] > 6 * 10 and pd.isna(api1["device_hours"])
    chat = _row(df, "chat", "lcae_stage1")
    # a local model costs device time, never dollars, whatever lcae.prices says
    assert pd.isna(chat["usd"]) and chat["device"] == "2 GPU"
    assert chat["device_hours"] == pytest.approx((chat["prompt_tokens"] + chat["completion_tokens"]) / 1000 / 3600 * 2)


def test_list_prices_batch_discount_and_reasoning_tokens(tmp_path):
    """Dollars from a model entry's `price` (less its batch discount where it sends batches),
    hidden reasoning tokens at its `reasoning_estimate`, else at its preset's headroom, billed
    as output; an API model without a price is named as unpriced."""
    from selfknow.plan_report import render_prices

    results = tmp_path / "results"
    _write_items(results, "mc", 2, 5, mcq=True)
    api = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    path = _config({
        "seed": 1, "results": str(results),
        "models": [
            {"name": "listed", **api, "price": {"input": 2.0, "output": 10.0, "source": "page, 2026-12-01"},
             "reasoning_estimate": {"tokens": 100, "source": "a measured run"}},
            {"name": "batched", **api, "batch": True, "request_preset": "openai_reasoning",
             "price": {"input": 2.0, "output": 10.0, "batch_discount": 0.5, "source": "page"}},
            {"name": "unpriced", **api},
            {"name": "delisted", **api, "unpriced": "delisted by its provider"}],
        "datasets": {"mc": {"loader": "mmlu", "path": str(tmp_path), "subjects": ["x"], "subject_range": [0, 5]}},
        "lcae": {"dataset": "mc", "n_items": 3, "strategies": ["standard"], "examinee_models": ["listed", "batched",
                 "unpriced", "delisted"], "repeats": 1, "conditions": ["baseline"], "max_new_tokens": 32}}, tmp_path)
    df, _ = make_plan(path)
    cfg = load_config(path)
    listed, batched = _row(df, "listed", "lcae_stage1"), _row(df, "batched", "lcae_stage1")
    # 3 items, one request each: 3 x 100 estimated, 3 x 8,192 (the preset's headroom) hidden tokens
    assert listed["reasoning_tokens"] == 300 and batched["reasoning_tokens"] == 3 * 8192
    assert listed["usd"] == pytest.approx((listed["prompt_tokens"] * 2 + (3 * 32 + 300) * 10) / 1e6)
    assert batched["usd"] == pytest.approx((batched["prompt_tokens"] * 1 + (3 * 32 + 3 * 8192) * 5) / 1e6)
    assert _row(df, "unpriced", "lcae_stage1")["reasoning_tokens"] == 0
    assert pd.isna(_row(df, "unpriced", "lcae_stage1")["usd"])
    # plan-only keys stay out of the spec rules carry as params: a new price reruns no job
    assert not {"price", "reasoning_estimate"} & set(model_spec(cfg, "listed"))
    assert "unpriced" not in model_spec(cfg, "delisted")
    table = render_prices(cfg, df)
    assert "| listed | 2 | 10 | - | page, 2026-12-01 | 100 | a measured run |" in table
    assert "| batched | 1 | 5 | yes | page | 8,192 | the request's reasoning headroom (an upper bound) |" in table
    assert "| unpriced | - | - | - | **no published price found**" in table
    # each model whose dollars are not counted gets a line saying why
    assert "\nunpriced: delisted (delisted by its provider)\n" in table
    assert "\nunpriced: unpriced (no `price` in its model entry nor in lcae.prices)\n" in table
    with pytest.raises(ConfigError, match="unpriced"):
        validate_config({**cfg, "models": [{**api, "name": "both", "unpriced": "x",
                                            "price": {"input": 1, "output": 1, "source": "s"}}]})


def test_finished_jobs_count_as_cached(lcae_config):
    done = Path(load_config(lcae_config)["results"]) / "lcae" / "stage1" / "api" / "final.parquet"
    done.parent.mkdir(parents=True)
    done.write_bytes(b"")
    df, _ = make_plan(lcae_config)
    row = _row(df, "api", "lcae_stage1")
    assert (row["jobs"], row["done_jobs"], row["requests"], row["cached"], row["prompt_tokens"]) == (1, 1, 0, 6, 0)
    assert _row(df, "api", "lcae_stage2")["requests"] == 12


def test_persistent_requests_by_hand(tmp_path):
    results = tmp_path / "results"
    _write_items(results, "qa", 6, 7, mcq=False)
    cfg = _config({
        "seed": 1, "results": str(results),
        "models": [{"name": "p", "backend": "hf", "hub_id": "org/p",
                    "checkpoints": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}]}],
        "datasets": {"qa": {"loader": "triviaqa", "path": str(tmp_path), "shuffle_seed": 1, "n_icl": 2,
                            "reserved_icl": 2, "blacklist": False,
                            "train_range": [0, 6], "test_range": [6, 13]}},
        "persistent": {"models": ["p"], "datasets": ["qa"], "train_checkpoints": 1, "n_train": 4, "n_test": 5,
                       "n_shots": 2, "seeds": [0], "variance_seeds": [0, 1]}}, tmp_path)
    df, _ = make_plan(cfg)
    sc = _row(df, "p", "persistent_sc")
    # every checkpoint's train (4) and test (5) sample is beam-searched once, in one job per
    # checkpoint (the transfer variant trains on all three and scores all three); each beam
    # search is one request
    assert (sc["jobs"], sc["requests"]) == (3, 3 * 4 + 3 * 5)
    assert sc["completion_tokens"] == 27 * 10 * 24  # num_beams x max_new_tokens (schema defaults)
    v = _row(df, "p", "persistent_variants")
    # training [c1 | c2, c3]: the 10 table variants score 5+2+2+2+2+2+2+2+2+2 = 23 (adapter,
    # checkpoint) pairs, the transfer variant 3 x 3, random_label 2 pairs x 3; 5 questions each;
    # but the three single-answer variants on one checkpoint's data (2 pairs each) are cut from
    # the transfer variant's table: no job, no request
    assert v["requests"] == (23 - 3 * 2 + 9 + 6) * 5
    # 7 trained table variants, transfer with both variance seeds (the second trains only), random_label
    assert v["jobs"] == 10 and v["train_tokens"] > 0
    assert set(df["stage"]) == {"persistent_sc", "persistent_variants"}


@pytest.mark.parametrize("judge_entry, hidden, device, hours", [
    # the authors' request shape through the Batch API: no reasoning; 3 jobs x the 24 h window waited
    ({"mode": "responses", "batch": True}, 0, "API batch", 3 * 24.0),
    # a reasoning judge, synchronous: its reasoning headroom per request counted, no wait estimate
    ({"request_preset": "openai_reasoning"}, 8192, "API", None)])
def test_persistent_judge_requests_reasoning_and_waiting(tmp_path, judge_entry, hidden, device, hours):
    results = tmp_path / "results"
    _write_items(results, "qa", 6, 7, mcq=False)
    cfg = _config({
        "seed": 1, "results": str(results),
        "models": [{"name": "p", "backend": "hf", "hub_id": "org/p", "gpu": 1,
                    "checkpoints": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}]},
                   {"name": "j", "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "gpt-5.4",
                    **judge_entry}],
        "datasets": {"qa": {"loader": "triviaqa", "path": str(tmp_path), "shuffle_seed": 1, "n_icl": 2,
                            "reserved_icl": 2, "blacklist": False,
                            "train_range": [0, 6], "test_range": [6, 13]}},
        "judge": {"llm_judge": "j", "correctness": "llm"},
        "persistent": {"models": ["p"], "datasets": ["qa"], "train_checkpoints": 1, "n_train": 4, "n_test": 5,
                       "n_shots": 2, "seeds": [0], "variance_seeds": [0, 1]}}, tmp_path)
    df, _ = make_plan(cfg)
    j = _row(df, "j", "persistent_judge")
    # one judge job per beam-search job, one request per question, each with the authors'
    # budget for 10 beams (max(4 x 10 + 2, 16) = 42) plus hidden reasoning where it reasons
    assert (j["jobs"], j["requests"]) == (_row(df, "p", "persistent_sc")["jobs"], 3 * (4 + 5))
    assert j["completion_tokens"] == 27 * (42 + hidden) and j["device"] == device
    assert j["device_hours"] == pytest.approx(hours) if hours else pd.isna(j["device_hours"])
    assert _row(df, "p", "persistent_sc")["device"] == "1 GPU"


@pytest.mark.parametrize("released", [False, True])
def test_gcm_jobs_by_hand(tmp_path, released):
    """Our GCM trains and scores once per adapter seed; the released one (`gcm_adapter`)
    scores once per (model, dataset) and trains nothing. Either scores the 2 evaluation
    checkpoints' 5 test answers and the training checkpoint's 4 train answers."""
    results = tmp_path / "results"
    _write_items(results, "qa", 6, 7, mcq=False)
    persistent = {"models": ["p"], "datasets": ["qa"], "train_checkpoints": 1, "n_train": 4, "n_test": 5,
                  "n_shots": 2, "seeds": [17, 18], "variance_seeds": [17, 18], "gcm_model": "g"}
    if released:
        persistent["gcm_adapter"] = {"hub_id": "org/gcm", "revision": "main"}
    cfg = _config({
        "seed": 1, "results": str(results),
        "models": [{"name": "p", "backend": "hf", "hub_id": "org/p",
                    "checkpoints": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}]},
                   {"name": "g", "backend": "hf", "hub_id": "org/g"}],
        "datasets": {"qa": {"loader": "triviaqa", "path": str(tmp_path), "shuffle_seed": 1, "n_icl": 2,
                            "reserved_icl": 2, "blacklist": False,
                            "train_range": [0, 6], "test_range": [6, 13]}},
        "persistent": persistent}, tmp_path)
    df, _ = make_plan(cfg)
    g = _row(df, "g", "persistent_gcm")
    jobs = 1 if released else 2
    assert (g["jobs"], g["requests"]) == (jobs, jobs * (2 * 5 + 4))
    assert bool(g["train_tokens"] == 0) == released


def test_cli_plan_prints_table_and_csv(lcae_config, tmp_path, capsys):
    assert main(["plan", str(lcae_config), "--csv", str(tmp_path / "plan.csv")]) == 0
    out = capsys.readouterr().out
    assert "| api | lcae_stage2 | 1 (0) | 12 |" in out and "**total**" in out
    assert pd.read_csv(tmp_path / "plan.csv")["requests"].sum() == 6 + 6 + 27 + 6 + 12 + (2 * 4 + 3 * 4)


def test_plan_writes_each_jobs_time_limit_from_its_hours(lcae_config, tmp_path):
    """Each LCAE job's time limit is its wall time by the plan (the model's device-hours over its
    GPUs: one job per model and stage here) x RUNTIME_MARGIN + RUNTIME_STARTUP_MIN; an API model
    answering at once adds no planned time, a batched one its completion window."""
    import json
    import math

    from selfknow.placement import runtime_key
    from selfknow.plan_runtimes import RUNTIME_MARGIN, RUNTIME_STARTUP_MIN, job_hours

    limits = tmp_path / "runtimes.json"
    df, _ = make_plan(lcae_config, runtimes=limits)
    got = json.loads(limits.read_text())
    assert len(got) == 6
    for model, gpus in (("chat", 2), ("api", 1)):
        for stage in ("lcae_stage1", "lcae_stage2"):
            hours = _row(df, model, stage)["device_hours"]
            wall = 0 if model == "api" else 60 * hours / gpus
            assert got[runtime_key(stage, {"model": model, "ckpt": "final"})] == \
                math.ceil(wall * RUNTIME_MARGIN + RUNTIME_STARTUP_MIN)
    assert _row(df, "chat", "lcae_stage1")["device_hours"] > 0
    cfg = {"models": [{"name": "batched", "backend": "openai", "batch": True, "batch_completion_window": "24h"}]}
    assert job_hours(cfg, {"batched": (3, 0)}, {"batched": (4, 500)}) == 24


def test_cli_plan_bad_config(tmp_path, capsys):
    path = tmp_path / "cfg.yaml"
    path.write_text("seed: 1\nmodels: []\n")
    assert main(["plan", str(path)]) == 2
    assert str(path) in capsys.readouterr().err


_CALLS = re.compile(r"\b(?:model_calls(?:_\w+)?|judge_calls)=(\d+)")


@pytest.mark.slow
def test_plan_predicts_tiny_run_requests(tiny_run):
    """The plan of config/test.yaml, counted as a cold run would make them (every job of the
    finished run is listed as cached), within 10 % of the model calls the run's job logs
    count and of the distinct requests in its request cache."""
    df, _ = make_plan(ROOT / "config" / "test.yaml", results=tiny_run)
    predicted = int(df["requests"].sum() + df["cached"].sum())
    assert df["requests"].sum() == 0  # every job of the run is done
    logged = sum(int(n) for log in (tiny_run / "logs").rglob("*.log")
                 for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if " done in " in line
                 for n in _CALLS.findall(line))
    cached = sum(1 for _ in (tiny_run / "cache").rglob("*.json"))
    assert logged > 0 and cached > 0
    assert abs(predicted - logged) <= 0.1 * logged, (predicted, logged)
    assert abs(predicted - cached) <= 0.1 * cached, (predicted, cached)


def test_react_requests_by_hand(tmp_path):
    """Table 34's agent (ladder.react): the L1 prior once per model, then every picked question
    runs to the step limit (the plan's replies take no action); a second configuration of the
    same model repeats the first one's shared steps, which it counts once."""
    results = tmp_path / "results"
    _write_items(results, "mc", 0, 5, mcq=True)
    cfg = _config({
        "seed": 1, "results": str(results),
        "models": [{"name": "api", "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}],
        "datasets": {"mc": {"loader": "mmlu", "path": str(tmp_path), "subjects": ["x"], "subject_range": [0, 5]}},
        "ladder": {"models": ["api"], "dataset": "mc", "n_sessions": 1, "n_turns": 2,
                   "react": {"dataset": "mc", "items_per_domain": 3, "configurations": [
                       {"name": "short", "model": "api", "max_steps": 2},
                       {"name": "long", "model": "api", "max_steps": 4}]}}}, tmp_path)
    df, _ = make_plan(cfg)
    react = _row(df, "api", "ladder_react")
    assert (react["jobs"], react["requests"]) == (2, 1 + 3 * 4)
