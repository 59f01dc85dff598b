"""`batch: true` on an `openai` model (selfknow.models.openai_batch) against a local server that
implements OpenAI's files and batches endpoints (tests/batch_server.py): submit, kill and
resume, partial failure, and the request cache shared with the synchronous path."""
from __future__ import annotations

import json
import sys

import pytest
import yaml

from batch_server import BatchServer, kill_once_waiting
from conftest import REPO
from selfknow.config import ConfigError, validate_config
from selfknow.models import LogprobsUnavailable, ModelSpecError, load_lm
from selfknow.models.http_retry import RequestFailed


@pytest.fixture
def server():
    s = BatchServer()
    yield s
    s.close()


def spec(server, **kw):
    base = {"name": "judge", "backend": "openai", "base_url": server.url, "model": "gpt-j",
            "mode": "chat", "max_retries": 2, "timeout_s": 5.0, "backoff_s": 0.01,
            "batch": True, "batch_poll_s": 0.02, "batch_max_wait_s": 20.0,
            "batch_completion_window": "24h", "batch_max_requests": 50000}
    return {**base, **kw}


def records(tmp_path):
    return sorted((tmp_path / "cache-batches").glob("*.json"))


def input_lines(server, batch_id):
    fid = server.batches[batch_id]["input_file_id"]
    return [json.loads(x) for x in server.files[fid]["content"].decode().splitlines()]


def test_submit_poll_download_and_cache_shared_with_sync_path(server, tmp_path):
    server.process_s = 0.15
    cache = tmp_path / "cache"
    lm = load_lm(spec(server), cache_dir=cache)
    out = lm.generate(["q1", "q2", "q1"], max_new_tokens=16, system="judge it")
    assert [g.text for g in out] == ["echo: q1", "echo: q2", "echo: q1"]
    assert (out[0].tokens_in, out[0].tokens_out) == (7, 2)
    # one upload, one batch, polled until done; identical requests sent once
    assert server.count("POST", "/v1/files") == 1 and server.count("POST", "/v1/batches") == 1
    assert server.count("GET", "/v1/batches/batch_1") >= 2
    lines = input_lines(server, "batch_1")
    assert len(lines) == 2 and {x["method"] for x in lines} == {"POST"}
    assert {x["url"] for x in lines} == {"/v1/chat/completions"}
    assert server.batches["batch_1"]["endpoint"] == "/v1/chat/completions"
    body = lines[0]["body"]
    assert body["model"] == "gpt-j" and body["max_tokens"] == 16 and body["temperature"] == 0.0
    assert body["messages"][0] == {"role": "system", "content": "judge it"}
    assert records(tmp_path) == []  # the record goes once the results are read

    # a second batch run and a synchronous run find every answer in the cache
    n = len(server.requests)
    for s in (spec(server), spec(server, batch=False)):
        again = load_lm(s, cache_dir=cache)
        assert [g.text for g in again.generate(["q1", "q2"], max_new_tokens=16,
                                               system="judge it")] == ["echo: q1", "echo: q2"]
        assert again.http_requests == 0
    assert len(server.requests) == n

    # only misses go to a new batch
    lm.generate(["q1", "q3"], max_new_tokens=16, system="judge it")
    assert [x["body"]["messages"][-1]["content"] for x in input_lines(server, "batch_2")] == ["q3"]


def test_batch_answers_equal_synchronous_answers(server, tmp_path):
    prompts = ["a", "b"]
    batch = load_lm(spec(server, mode="completions"), cache_dir=tmp_path / "c1")
    sync = load_lm(spec(server, mode="completions", batch=False), cache_dir=tmp_path / "c2")
    assert batch.generate(prompts, max_new_tokens=4) == sync.generate(prompts, max_new_tokens=4)
    assert {x["url"] for x in input_lines(server, "batch_1")} == {"/v1/completions"}
    assert server.count("POST", "/v1/completions") == 2  # the synchronous run's two requests


def test_repeats_are_separate_batch_requests(server, tmp_path):
    cache = tmp_path / "cache"
    lm = load_lm(spec(server), cache_dir=cache)
    for repeat in (0, 1):
        lm.generate(["same"], max_new_tokens=8, sample_index=repeat)
    assert [len(input_lines(server, b)) for b in sorted(server.batches)] == [1, 1]
    again = load_lm(spec(server), cache_dir=cache)
    for repeat in (0, 1):
        again.generate(["same"], max_new_tokens=8, sample_index=repeat)
    assert again.http_requests == 0


_KILLED_CLIENT = """
import json, sys
from selfknow.models import load_lm
lm = load_lm(json.loads(sys.argv[1]), cache_dir=sys.argv[2])
lm.generate(["k1", "k2"], max_new_tokens=8)
"""


def test_killed_client_resumes_recorded_batch(server, tmp_path):
    server.hold = {"batch_1"}  # the batch runs until the first client is dead
    cache = tmp_path / "cache"
    kill_once_waiting([sys.executable, "-c", _KILLED_CLIENT, json.dumps(spec(server)), str(cache)],
                      lambda: records(tmp_path) and server.count("GET", "/v1/batches/") >= 1)
    assert json.loads(records(tmp_path)[0].read_text())["batch_id"] == "batch_1"

    server.hold = set()
    lm = load_lm(spec(server), cache_dir=cache)
    assert [g.text for g in lm.generate(["k1", "k2"], max_new_tokens=8)] == ["echo: k1", "echo: k2"]
    assert server.count("POST", "/v1/files") == 1 and server.count("POST", "/v1/batches") == 1
    assert lm.http_requests == 2  # one poll of batch_1, one download
    assert records(tmp_path) == []


def test_wait_limit_keeps_record_and_rerun_resumes(server, tmp_path):
    server.hold = {"batch_1"}
    cache = tmp_path / "cache"
    with pytest.raises(RequestFailed, match=r"batch_1 still 'in_progress'.*batch_max_wait_s"):
        load_lm(spec(server, batch_max_wait_s=0.1), cache_dir=cache).generate(
            ["w"], max_new_tokens=8)
    assert len(records(tmp_path)) == 1
    server.hold = set()
    out = load_lm(spec(server), cache_dir=cache).generate(["w"], max_new_tokens=8)
    assert out[0].text == "echo: w" and server.count("POST", "/v1/batches") == 1


def test_record_of_unknown_batch_resubmits_and_corrupt_record_is_named(server, tmp_path):
    server.hold = {"batch_1"}
    cache = tmp_path / "cache"
    with pytest.raises(RequestFailed, match="batch_max_wait_s"):
        load_lm(spec(server, batch_max_wait_s=0.05), cache_dir=cache).generate(
            ["u"], max_new_tokens=8)
    (record,) = records(tmp_path)
    record.write_text("{not json")
    with pytest.raises(RequestFailed, match=f"batch record {record} is unreadable"):
        load_lm(spec(server), cache_dir=cache).generate(["u"], max_new_tokens=8)
    record.write_text(json.dumps({"batch_id": "batch_999"}))
    out = load_lm(spec(server), cache_dir=cache).generate(["u"], max_new_tokens=8)
    assert out[0].text == "echo: u" and server.count("POST", "/v1/batches") == 2


def test_run_killed_during_resubmission_resumes_both_rounds(server, tmp_path):
    server.hold = {"batch_2"}  # the resubmission of the 500 never finishes in the first run
    cache = tmp_path / "cache"
    with pytest.raises(RequestFailed, match="batch_2 still 'in_progress'"):
        load_lm(spec(server, batch_max_wait_s=0.2), cache_dir=cache).generate(
            ["r1", "FLAKY r2"], max_new_tokens=8)
    assert len(records(tmp_path)) == 2  # the finished first round is still recorded
    server.hold = set()
    lm = load_lm(spec(server), cache_dir=cache)
    out = lm.generate(["r1", "FLAKY r2"], max_new_tokens=8)
    assert [g.text for g in out] == ["echo: r1", "echo: FLAKY r2"]
    assert server.count("POST", "/v1/batches") == 2 and records(tmp_path) == []


def test_large_call_split_into_jobs_submitted_before_polling(server, tmp_path):
    lm = load_lm(spec(server, batch_max_requests=2), cache_dir=tmp_path / "cache")
    prompts = [f"p{i}" for i in range(5)]
    assert [g.text for g in lm.generate(prompts, max_new_tokens=8)] == \
        [f"echo: {p}" for p in prompts]
    assert [len(input_lines(server, b)) for b in sorted(server.batches)] == [2, 2, 1]
    creates = [n for n, r in enumerate(server.requests) if r == ("POST", "/v1/batches")]
    polls = [n for n, r in enumerate(server.requests) if r[0] == "GET" and "/batches/" in r[1]]
    assert max(creates) < min(polls)


def test_partial_failure_retries_smaller_batch_and_names_permanent_failure(server, tmp_path):
    cache = tmp_path / "cache"
    lm = load_lm(spec(server), cache_dir=cache)
    with pytest.raises(RequestFailed, match=r"1 of 3 batch request\(s\) failed: request 2 "
                                            r"\(custom_id 2-[0-9a-f]{40}\): HTTP 400") as err:
        lm.generate(["fine", "FLAKY one", "BAD two"], max_new_tokens=8)
    assert "request 0" not in str(err.value) and "request 1" not in str(err.value)
    # the 500 is resubmitted alone; the 400 is not resubmitted
    assert server.count("POST", "/v1/batches") == 2
    assert [x["body"]["messages"][-1]["content"] for x in input_lines(server, "batch_2")] \
        == ["FLAKY one"]
    # the successes are cached: asking for them again makes no HTTP call
    again = load_lm(spec(server), cache_dir=cache)
    assert [g.text for g in again.generate(["fine", "FLAKY one"], max_new_tokens=8)] \
        == ["echo: fine", "echo: FLAKY one"]
    assert again.http_requests == 0


def test_calls_run_together_share_one_batch_and_fail_alone(server, tmp_path):
    """`together`: the calls' requests (two budgets, as the judge's candidate counts) go out as
    one batch job; a request refused there is not sent again when its call is answered, and
    only that call fails."""
    lm = load_lm(spec(server), cache_dir=tmp_path / "cache")
    short = lambda: lm.generate(["a", "b"], max_new_tokens=8)  # noqa: E731
    long = lambda: lm.generate(["c"], max_new_tokens=24)  # noqa: E731
    out = lm.together([short, long])
    assert [[g.text for g in o] for o in out] == [["echo: a", "echo: b"], ["echo: c"]]
    assert server.count("POST", "/v1/batches") == 1
    assert sorted(x["body"]["max_tokens"] for x in input_lines(server, "batch_1")) == [8, 8, 24]
    assert (lm.stats.hits, lm.stats.misses) == (0, 3)  # the gathering pass is not counted
    # a together inside a call (the judge's budgets inside its splits) joins the outer batch
    inner = lambda p: lambda: lm.together([lambda: lm.generate([p], max_new_tokens=8),  # noqa: E731
                                           lambda: lm.generate([p], max_new_tokens=24)])
    nested = lm.together([inner("x"), inner("y")])
    assert [[o[0].text for o in pair] for pair in nested] == [["echo: x"] * 2, ["echo: y"] * 2]
    assert server.count("POST", "/v1/batches") == 2 and len(input_lines(server, "batch_2")) == 4
    with pytest.raises(RequestFailed, match=r"1 of 2 batch request\(s\) failed: .*HTTP 400"):
        lm.together([lambda: lm.generate(["BAD d"], max_new_tokens=8), lambda: lm.generate(["e"], max_new_tokens=24)])
    assert lm.generate(["e"], max_new_tokens=24)[0].text == "echo: e"  # answered and cached
    assert server.count("POST", "/v1/batches") == 3


def test_retries_exhausted_names_request(server, tmp_path):
    server.flaky_times = 10
    lm = load_lm(spec(server, max_retries=1), cache_dir=tmp_path / "cache")
    with pytest.raises(RequestFailed, match=r"1 of 2 batch request\(s\) failed: request 1 "
                                            r"\(custom_id .*HTTP 500"):
        lm.generate(["ok", "FLAKY"], max_new_tokens=8)
    assert server.count("POST", "/v1/batches") == 2  # first try and max_retries=1


def test_expired_batch_resubmits_unanswered_requests(server, tmp_path):
    server.expire_after = 1
    lm = load_lm(spec(server), cache_dir=tmp_path / "cache")
    out = lm.generate(["e1", "e2", "e3"], max_new_tokens=8)
    assert [g.text for g in out] == ["echo: e1", "echo: e2", "echo: e3"]
    assert server.batches["batch_1"]["status"] == "expired"
    assert [len(input_lines(server, b)) for b in sorted(server.batches)] == [3, 2, 1]


def test_cancelled_batch_fails_and_is_not_resumed(server, tmp_path):
    server.cancel = {"batch_1"}
    cache = tmp_path / "cache"
    with pytest.raises(RequestFailed, match="'judge': batch batch_1 cancelled"):
        load_lm(spec(server), cache_dir=cache).generate(["c"], max_new_tokens=8)
    assert records(tmp_path) == []
    server.cancel = set()
    assert load_lm(spec(server), cache_dir=cache).generate(["c"], max_new_tokens=8)[0].text \
        == "echo: c"
    assert server.count("POST", "/v1/batches") == 2  # submitted afresh


def test_rejected_batch_request_fails_clearly(server, tmp_path):
    lm = load_lm(spec(server, batch_completion_window="1h"), cache_dir=tmp_path / "cache")
    with pytest.raises(RequestFailed, match=r"'judge': POST .*/v1/batches request batch create "
                                            r"failed after 1 attempt.*HTTP 400"):
        lm.generate(["x"], max_new_tokens=8)


def test_batch_settings_from_schema_defaults_and_only_on_openai_models(server, tmp_path):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["models"].append({"name": "judge", "backend": "openai", "base_url": server.url,
                          "model": "gpt-j", "batch": True})
    # a plain dict: the batch settings are checked here, not the backend's other keys
    entry = dict(validate_config(cfg, "config.yaml")["models"][-1])
    jobs = load_lm(entry, cache_dir=tmp_path / "cache").transport
    assert (jobs.poll_s, jobs.max_wait_s, jobs.window, jobs.max_requests) == \
        (60, 93600, "24h", 50000)
    # a spec built in code gets the same defaults from the schema
    assert load_lm({k: v for k, v in spec(server).items() if k != "batch_max_requests"},
                   cache_dir=None).transport.max_requests == 50000
    hf = {"name": "local", "backend": "hf", "path": str(tmp_path), "batch": True}
    with pytest.raises(ModelSpecError, match="'local': key 'backend': 'openai' was expected"):
        load_lm(hf, cache_dir=None)
    cfg["models"][0]["batch"] = True
    with pytest.raises(ConfigError, match=r"config.yaml: models\[0\].backend: 'openai' was "
                                          r"expected"):
        validate_config(cfg, "config.yaml")


def test_logprob_requests_go_in_the_batch_and_are_read_as_on_the_synchronous_path(server, tmp_path):
    """next_token_logprobs builds its request apart from reading the answer: the batch line
    carries the logprob parameters, and an answer without top_logprobs (this server gives
    none) fails as the synchronous path does, naming the model and the setting."""
    lm = load_lm(spec(server, logprobs=True, top_logprobs=3), cache_dir=tmp_path / "cache")
    with pytest.raises(LogprobsUnavailable, match=r"'judge': next_token_logprobs request 0: .*'logprobs: false'"):
        lm.next_token_logprobs(["Is it?"], ["Yes", "No"], chat=True)
    (line,) = input_lines(server, "batch_1")
    assert line["url"] == "/v1/chat/completions"
    assert (line["body"]["logprobs"], line["body"]["top_logprobs"]) == (True, 3)
    assert line["body"]["max_tokens"] == 1 and line["body"]["messages"][-1]["content"] == "Is it?"


def test_a_request_that_cannot_be_built_sends_nothing_and_leaves_the_backend_usable(server, tmp_path):
    """A request's builder raising (chat on a completions model) stops the call before any
    upload, with the backend's own message; the model's next call runs as usual."""
    lm = load_lm(spec(server, mode="completions", logprobs=True), cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match=r"'judge': chat=True needs 'mode: chat'"):
        lm.next_token_logprobs(["Is it?"], ["Yes", "No"], chat=True)
    assert server.requests == []
    assert [g.text for g in lm.generate(["q1"], max_new_tokens=8)] == [" echo: q1"]
    assert server.count("POST", "/v1/batches") == 1 and input_lines(server, "batch_1")[0]["body"]["prompt"] == "q1"
