"""The `openai` backend against a real local HTTP server (stdlib, 127.0.0.1) that speaks the
OpenAI format and misbehaves on purpose: 429 with Retry-After, 500, a hang past the timeout,
always-failing requests; plus logprobs, echo, concurrency and the request cache."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from selfknow.models import LogprobsUnavailable, ModelSpecError, UnsupportedCall, load_lm
from selfknow.models.http_retry import RequestFailed
from selfknow.rehearsal.server import QuietHandler, reasoning_rule_violation, schema_instance, send_json, serve

TOP = {"A": -0.2, "B": -1.9, " A": -3.0, "7": -4.0}


class FakeServer:
    """OpenAI-compatible server (Chat Completions, Responses, completions). `failures` is
    consumed one per request ("429", "500", "hang"); a prompt containing FAIL always gets 500,
    BAD gets 400; with `gather` n, requests wait (at most 10 s) until
    n are in flight at once, the first time (to observe concurrency under any load); `give_logprobs=False`
    ignores the logprobs parameter. `reasoning=True` serves a reasoning model: the parameters
    it rejects get HTTP 400 (`reasoning_rule_violation`), and it spends `reasoning_spend` hidden
    tokens from the token limit before its 3-token answer (an empty, cut answer if the limit
    is smaller)."""

    def __init__(self):
        self.reasoning = False
        self.reasoning_spend = 0
        self.failures: list[str] = []
        self.requests: list[tuple[str, dict, dict]] = []
        self.hang_s = 2.0
        self.retry_after = "0.3"  # seconds, the Retry-After of a "429" failure
        self.give_logprobs = True
        self.in_flight = 0
        self.max_in_flight = 0
        self.gather = 0
        self.gathered = threading.Event()
        self.lock = threading.Lock()
        server = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, body, dict(self.headers)))
                    mode = server.failures.pop(0) if server.failures else "ok"
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    if server.gather and server.in_flight >= server.gather:
                        server.gathered.set()
                if server.gather:
                    server.gathered.wait(10)
                self._answer(mode, body)

            def _send(self, code, obj, headers=()):
                # out of flight before the reply is written: a client that has read it may send
                # its next request before this thread runs again
                with server.lock:
                    server.in_flight -= 1
                send_json(self, code, obj, headers)

            def _answer(self, mode, body):
                text = json.dumps(body)
                if mode == "429":
                    return self._send(429, {"error": "slow down"}, [("Retry-After", server.retry_after)])
                if mode == "500" or "FAIL" in text:
                    return self._send(500, {"error": "boom"})
                if "BAD" in text:
                    return self._send(400, {"error": "bad request"})
                broken = reasoning_rule_violation(self.path, body) if server.reasoning else None
                if broken:
                    param, message = broken
                    return self._send(400, {"error": {"message": message, "type": "invalid_request_error",
                                                      "param": param, "code": "unsupported_parameter"}})
                if mode == "hang":
                    time.sleep(server.hang_s)
                self._send(200, server.respond(self.path, body))

        self.httpd, self.url, self.thread = serve(Handler)

    def _budget_left(self, body, limit_key):
        """Whether a reasoning model's answer fits the token limit after its hidden reasoning,
        and the output tokens spent (a classic model's 3-token answer always fits)."""
        if not self.reasoning:
            return True, 3
        limit = body[limit_key]
        return limit >= self.reasoning_spend + 3, min(limit, self.reasoning_spend + 3)

    def respond(self, path, body):
        if path.endswith("/responses"):
            return self._respond_responses(body)
        usage = {"prompt_tokens": 11, "completion_tokens": 3}
        want_lp = self.give_logprobs and body.get("logprobs")
        if path.endswith("/chat/completions"):
            user = body["messages"][-1]["content"]
            fits, spent = self._budget_left(body, "max_completion_tokens" if self.reasoning else "max_tokens")
            usage["completion_tokens"] = spent
            choice = {"index": 0, "finish_reason": "stop" if fits else "length",
                      "message": {"role": "assistant", "content": f"echo: {user}\nsecond line" if fits else ""}}
            if fits and (body.get("response_format") or {}).get("type") == "json_schema":
                choice["message"]["content"] = json.dumps(schema_instance(body["response_format"]["json_schema"]))
            if want_lp:
                choice["logprobs"] = {"content": [{
                    "token": "A", "logprob": -0.2,
                    "top_logprobs": [{"token": t, "logprob": v} for t, v in TOP.items()]}]}
            return {"object": "chat.completion", "choices": [choice], "usage": usage}
        prompt = body["prompt"]
        choice = {"index": 0, "finish_reason": "length", "text": " done"}
        if body.get("echo") and want_lp:
            # one token per character; token j has log-probability -(j+1)/10, the first none
            choice["text"] = prompt + "X"
            n = len(prompt) + 1
            choice["logprobs"] = {"tokens": list(prompt) + ["X"],
                                  "text_offset": list(range(n)),
                                  "token_logprobs": [None] + [-(j + 1) / 10 for j in range(1, n)]}
        elif want_lp:
            choice["logprobs"] = {"tokens": ["A"], "token_logprobs": [-0.2],
                                  "top_logprobs": [dict(TOP)]}
        return {"object": "text_completion", "choices": [choice], "usage": usage}

    def _respond_responses(self, body):
        """A Responses API answer as OpenAI documents it: a reasoning item, then a message
        whose content parts are `output_text`; `incomplete` when the limit ran out."""
        fits, spent = self._budget_left(body, "max_output_tokens")
        output = [{"type": "reasoning", "id": "rs_1", "summary": []}]
        if fits:
            output.append({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": "echo: ", "annotations": []},
                                       {"type": "output_text", "text": f"{body['input']}\nsecond line",
                                        "annotations": []}]})
        return {"id": "resp_1", "object": "response", "model": body["model"],
                "status": "completed" if fits else "incomplete",
                "incomplete_details": None if fits else {"reason": "max_output_tokens"},
                "instructions": body.get("instructions"), "output": output,
                "usage": {"input_tokens": 11, "output_tokens": spent,
                          "output_tokens_details": {"reasoning_tokens": spent - 3 if fits else spent}}}

    def close(self):
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def spec(server, **kw):
    base = {"name": "api-model", "backend": "openai", "base_url": server.url, "model": "srv-m",
            "mode": "chat", "max_concurrency": 4, "max_retries": 4, "timeout_s": 1.0,
            "backoff_s": 0.01, "logprobs": True}
    return {**base, **kw}


def test_chat_generate_cuts_stop_counts_tokens_and_sends_key(server, monkeypatch, tmp_path):
    monkeypatch.setenv("MY_KEY", "sk-test")
    lm = load_lm(spec(server, api_key_env="MY_KEY"), cache_dir=tmp_path)
    out = lm.generate(["hello", "world"], max_new_tokens=20, stop=["\n"], system="be brief")
    assert [g.text for g in out] == ["echo: hello", "echo: world"]
    assert (out[0].tokens_in, out[0].tokens_out, out[0].finish_reason) == (11, 3, "stop")
    path, body, headers = server.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["model"] == "srv-m" and body["stop"] == ["\n"] and body["temperature"] == 0.0


def test_missing_key_env_is_a_clear_error(server, monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(ModelSpecError, match="'api-model'.*NOPE_KEY"):
        load_lm(spec(server, api_key_env="NOPE_KEY"), cache_dir=None)


def test_completions_generate(server):
    lm = load_lm(spec(server, mode="completions"), cache_dir=None)
    g = lm.generate(["The sky is"], max_new_tokens=3)[0]
    assert (g.text, g.finish_reason) == (" done", "length")
    assert server.requests[0][0] == "/v1/completions"
    assert server.requests[0][1]["prompt"] == "The sky is"
    with pytest.raises(ValueError, match="needs 'mode: chat'"):
        lm.generate(["x"], max_new_tokens=1, chat=True)


def test_retries_429_500_timeout_then_success(server):
    server.failures = ["429", "500", "hang"]
    server.hang_s = 1.5
    lm = load_lm(spec(server, timeout_s=0.5), cache_dir=None)
    t0 = time.monotonic()
    out = lm.generate(["hi"], max_new_tokens=5)
    elapsed = time.monotonic() - t0
    assert out[0].text.startswith("echo: hi")
    assert len(server.requests) == 4 and lm.http_requests == 4
    # Retry-After (0.3 s) and the timeout (0.5 s) were both waited for
    assert elapsed >= 0.8


def test_retry_after_is_waited_in_full_up_to_its_ceiling(server, monkeypatch):
    """A Retry-After longer than max_backoff_s is still waited for in full; one longer than
    max_retry_after_s fails at once, naming the wait and the key."""
    import selfknow.models.openai_transport as transport

    waits = []

    class Clock:  # the transport's own `time`, whose sleeps are recorded, not slept
        sleep = staticmethod(waits.append)

        def __getattr__(self, name):
            return getattr(time, name)

    monkeypatch.setattr(transport, "time", Clock())
    server.failures, server.retry_after = ["429", "500"], "7"
    lm = load_lm(spec(server, backoff_s=1.0, max_backoff_s=0.25, max_retry_after_s=10), cache_dir=None)
    assert lm.generate(["hi"], max_new_tokens=5)[0].text.startswith("echo: hi")
    # Retry-After 7 s in full, then the backoff (1 s x jitter in [0.5, 1.5)) cut to 0.25 s
    assert waits == [7.0, 0.25] and len(server.requests) == 3
    server.failures, server.retry_after = ["429"], "3600"
    with pytest.raises(RequestFailed, match=r"1 attempt.*HTTP 429.*retry after 3600 s.*max_retry_after_s = 10"):
        lm.generate(["again"], max_new_tokens=5)
    assert len(server.requests) == 4 and waits == [7.0, 0.25]


def test_always_failing_names_model_endpoint_and_request(server, tmp_path):
    lm = load_lm(spec(server, max_retries=2), cache_dir=tmp_path)
    with pytest.raises(RequestFailed) as err:
        lm.generate(["fine", "FAIL please"], max_new_tokens=5)
    msg = str(err.value)
    assert "'api-model'" in msg and "/chat/completions" in msg and "request 1" in msg
    assert "3 attempt" in msg and "HTTP 500" in msg
    assert len(server.requests) == 1 + 3
    # the request that succeeded was cached despite its batch failing
    again = load_lm(spec(server), cache_dir=tmp_path)
    assert again.generate(["fine"], max_new_tokens=5)[0].text.startswith("echo: fine")
    assert again.http_requests == 0
    n = len(server.requests)
    with pytest.raises(RequestFailed, match="1 attempt.*HTTP 400"):  # 4xx: no retry
        lm.generate(["BAD"], max_new_tokens=5)
    assert len(server.requests) == n + 1


def test_connection_refused_is_retried_then_fails(server):
    url = server.url
    server.close()
    lm = load_lm(spec(server, base_url=url, max_retries=1), cache_dir=None)
    with pytest.raises(RequestFailed, match="request 0 failed after 2 attempt"):
        lm.generate(["x"], max_new_tokens=1)


def test_bounded_concurrency(server):
    server.gather = 3  # a fixed delay let a loaded machine start the threads one after another
    lm = load_lm(spec(server, max_concurrency=3), cache_dir=None)
    out = lm.generate([f"p{i}" for i in range(9)], max_new_tokens=2)
    assert [g.text for g in out] == [f"echo: p{i}\nsecond line" for i in range(9)]
    assert server.max_in_flight == 3


def test_next_token_logprobs_chat_and_completions(server):
    cands = ["A", "B", "C", " A"]
    chat = load_lm(spec(server), cache_dir=None).next_token_logprobs(["q1", "q2"], cands)
    np.testing.assert_array_equal(chat, [[-0.2, -1.9, -np.inf, -3.0]] * 2)
    body = server.requests[0][1]
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["top_logprobs"] == 20
    comp = load_lm(spec(server, mode="completions"), cache_dir=None)
    np.testing.assert_array_equal(comp.next_token_logprobs(["q"], cands),
                                  [[-0.2, -1.9, -np.inf, -3.0]])
    assert server.requests[-1][1]["logprobs"] == 20


def test_logprobs_unavailable_paths(server):
    no_lp = load_lm(spec(server, logprobs=False), cache_dir=None)
    with pytest.raises(LogprobsUnavailable, match="'api-model'.*next_token_logprobs"):
        no_lp.next_token_logprobs(["q"], ["A"])
    assert server.requests == []  # refused before any request
    server.give_logprobs = False  # the spec claims logprobs, the server ignores the parameter
    ignoring = load_lm(spec(server), cache_dir=None)
    with pytest.raises(LogprobsUnavailable, match="carries no top_logprobs"):
        ignoring.next_token_logprobs(["q"], ["A"])
    with pytest.raises(LogprobsUnavailable, match="'api-model'.*echo"):
        ignoring.loglikelihood([("a", "b")])
    with pytest.raises(UnsupportedCall, match="'api-model'.*beam search"):
        ignoring.beam_search(["q"], num_beams=3, max_new_tokens=4)


def test_loglikelihood_via_echo(server):
    lm = load_lm(spec(server, mode="completions", echo_logprobs=True), cache_dir=None)
    pairs = [("The sky", " is"), ("ab", "cde")]
    got = lm.loglikelihood(pairs)
    # characters at offsets len(ctx) .. len(ctx+cont)-1 carry -(offset+1)/10
    want = [sum(-(j + 1) / 10 for j in range(len(c), len(c) + len(x))) for c, x in pairs]
    assert got == pytest.approx(want)
    bodies = [r[1] for r in server.requests]
    assert all(b["echo"] is True and b["logprobs"] == 1 for b in bodies)
    assert sorted(b["prompt"] for b in bodies) == ["The sky is", "abcde"]


def test_rerun_makes_zero_http_requests(server, tmp_path):
    prompts = ["a", "b", "c"]
    first = load_lm(spec(server), cache_dir=tmp_path)
    out = first.generate(prompts, max_new_tokens=4)
    lp = first.next_token_logprobs(prompts, ["A", "B"])
    n = len(server.requests)
    assert n == 6
    again = load_lm(spec(server, timeout_s=9.0, max_retries=1), cache_dir=tmp_path)
    assert again.generate(prompts, max_new_tokens=4) == out  # timeouts/retries not in key
    np.testing.assert_array_equal(again.next_token_logprobs(prompts, ["A", "B"]), lp)
    assert len(server.requests) == n and again.http_requests == 0
    assert (again.stats.hits, again.stats.misses) == (6, 0)


# ---- reasoning models, the Responses API, repeats -----------------------------------------------


def test_reasoning_server_refuses_what_openai_refuses(server):
    import httpx

    server.reasoning = True
    classic = load_lm(spec(server, logprobs=False), cache_dir=None)
    with pytest.raises(RequestFailed, match='1 attempt.*HTTP 400.*"param": "max_tokens"'):
        classic.generate(["q"], max_new_tokens=16)
    half = load_lm(spec(server, logprobs=False, token_param="max_completion_tokens"), cache_dir=None)
    with pytest.raises(RequestFailed, match='HTTP 400.*"param": "temperature"'):
        half.generate(["q"], max_new_tokens=16)
    assert len(server.requests) == 2  # a 400 is not retried
    # top_p and stop, which the backend never sends to such a model, are refused as well;
    # temperature 1 (the default) is accepted on both endpoints
    chat = {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_completion_tokens": 9}
    for extra, param in (({"top_p": 0.9}, "top_p"), ({"stop": ["\n"]}, "stop"), ({"temperature": 0.7}, "temperature")):
        r = httpx.post(f"{server.url}/chat/completions", json={**chat, **extra}, timeout=5)
        assert r.status_code == 400 and r.json()["error"]["param"] == param
    r = httpx.post(f"{server.url}/responses", json={"model": "m", "input": "q", "top_p": 0.5}, timeout=5)
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"
    assert httpx.post(f"{server.url}/chat/completions", json={**chat, "temperature": 1}, timeout=5).status_code == 200


def test_reasoning_preset_passes_the_rules_and_leaves_room_to_reason(server):
    server.reasoning, server.reasoning_spend = True, 900  # more than LADDER's or LCAE's 64-token budget
    lm = load_lm(spec(server, logprobs=False, request_preset="openai_reasoning"), cache_dir=None)
    [g] = lm.generate(["hello"], max_new_tokens=64, stop=["\n"], system="be brief", temperature=0.0)
    assert (g.text, g.finish_reason, g.tokens_out) == ("echo: hello", "stop", 903)  # stop cut here
    body = server.requests[-1][1]
    assert body == {"model": "srv-m", "max_completion_tokens": 64 + 8192, "reasoning_effort": "medium",
                    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]}
    # a stage that samples (LADDER's simulated user at 0.7) sends no temperature or seed either
    [u] = lm.generate(["user turn"], max_new_tokens=80, temperature=0.7, sample_index=2)
    assert u.text.startswith("echo: user turn") and not {"temperature", "seed"} & set(server.requests[-1][1])
    # an option on the entry wins over its preset: without headroom the reasoning eats the budget
    tight = load_lm(spec(server, logprobs=False, request_preset="openai_reasoning", reasoning_tokens=0,
                         reasoning_effort="low"), cache_dir=None)
    [t] = tight.generate(["hello"], max_new_tokens=64)
    assert (t.text, t.finish_reason) == ("", "length")
    assert server.requests[-1][1]["max_completion_tokens"] == 64
    assert server.requests[-1][1]["reasoning_effort"] == "low"
    with pytest.raises(ModelSpecError, match="'api-model'.*'request_preset' must be one of"):
        load_lm(spec(server, request_preset="o9"), cache_dir=None)
    with pytest.raises(ModelSpecError, match="'api-model'.*'token_param' must be one of"):
        load_lm(spec(server, token_param="max_new_tokens"), cache_dir=None)


def test_responses_endpoint(server):
    lm = load_lm(spec(server, mode="responses", logprobs=False), cache_dir=None)
    [g] = lm.generate(["hello"], max_new_tokens=20, stop=["\n"], system="be brief")
    # the answer is the message item's output_text parts, after the reasoning item
    assert (g.text, g.tokens_in, g.tokens_out, g.finish_reason) == ("echo: hello", 11, 3, "stop")
    path, body, _ = server.requests[-1]
    assert path == "/v1/responses"
    assert body == {"model": "srv-m", "temperature": 0.0, "input": "hello", "instructions": "be brief",
                    "max_output_tokens": 20}
    # a reasoning model behind it, with the preset: reasoning.effort, no temperature
    server.reasoning, server.reasoning_spend = True, 500
    reasoning = load_lm(spec(server, mode="responses", logprobs=False, request_preset="openai_reasoning"),
                        cache_dir=None)
    [r] = reasoning.generate(["hi"], max_new_tokens=16)
    assert (r.text, r.tokens_out, r.finish_reason) == ("echo: hi\nsecond line", 503, "stop")
    assert server.requests[-1][1] == {"model": "srv-m", "input": "hi", "max_output_tokens": 16 + 8192,
                                      "reasoning": {"effort": "medium"}}
    # the limit runs out inside the reasoning: status incomplete, recorded as a cut answer
    cut = load_lm(spec(server, mode="responses", logprobs=False, request_preset="openai_reasoning",
                       reasoning_tokens=0), cache_dir=None)
    [c] = cut.generate(["hi"], max_new_tokens=16)
    assert (c.text, c.tokens_out, c.finish_reason) == ("", 16, "length")
    with pytest.raises(ModelSpecError, match="'api-model'.*'logprobs: true' needs 'mode: chat'"):
        load_lm(spec(server, mode="responses"), cache_dir=None)


def test_repeats_are_requests_for_an_api_model_and_shared_by_local_greedy_decoding(server, tmp_path):
    from model_fixtures import build_tiny_gpt2

    from selfknow.models.registry import repeats_share_requests

    api = load_lm(spec(server), cache_dir=tmp_path / "api")
    first = [api.generate(["same prompt"], max_new_tokens=8, sample_index=k)[0] for k in range(3)]
    assert len(server.requests) == 3 and len(list((tmp_path / "api").rglob("*.json"))) == 3
    again = load_lm(spec(server), cache_dir=tmp_path / "api")
    assert [again.generate(["same prompt"], max_new_tokens=8, sample_index=k)[0] for k in range(3)] == first
    assert again.http_requests == 0
    build_tiny_gpt2(tmp_path / "tiny")
    local = load_lm({"name": "tiny", "backend": "hf", "path": str(tmp_path / "tiny")}, cache_dir=tmp_path / "hf")
    greedy = [local.generate(["same prompt"], max_new_tokens=4, sample_index=k)[0] for k in range(3)]
    assert greedy == [greedy[0]] * 3 and (local.stats.misses, local.stats.hits) == (1, 2)
    assert len(list((tmp_path / "hf").rglob("*.json"))) == 1
    for k in range(3):  # sampling: one request per repeat again
        local.generate(["same prompt"], max_new_tokens=4, temperature=1.0, sample_index=k)
    assert local.stats.misses == 4
    assert repeats_share_requests({"backend": "hf"}, 0.0)
    assert not repeats_share_requests({"backend": "hf"}, 0.7)
    assert not repeats_share_requests({"backend": "openai"}, 0.0)


# ---- structured output -------------------------------------------------------------------------


def test_json_schemas_go_to_the_server_as_a_strict_response_format(server, tmp_path):
    """Each prompt's schema reaches a server that honours it as a strict json_schema
    response_format, and the reply is an instance of it (the LADDER profile and LCAE Stage-2
    schemas, as the protocols build them); `structured_output: false` and the completions
    endpoint send none; a constrained reply has its own cache entry."""
    import jsonschema

    from selfknow.protocols.ladder.prompted import profile_schema
    from selfknow.protocols.lcae.metacognition import assessment_schema

    schemas = [profile_schema(["anatomy", "astronomy"]), assessment_schema(3)]
    lm = load_lm(spec(server), cache_dir=tmp_path)
    out = lm.generate(["p1", "p2"], max_new_tokens=32, json_schemas=schemas)
    sent = {body["messages"][-1]["content"]: body for _, body, _ in server.requests}
    for prompt, schema, g in zip(["p1", "p2"], schemas, out):
        assert sent[prompt]["response_format"] == {
            "type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
        jsonschema.validate(json.loads(g.text), schema)
    assert json.loads(out[1].text) == {"error_probability": 0.5, "final_answer": "C"}
    n = len(server.requests)
    free = lm.generate(["p1"], max_new_tokens=32)
    assert free[0].text.startswith("echo: p1") and len(server.requests) == n + 1   # not the cached reply
    assert lm.generate(["p1"], max_new_tokens=32, json_schemas=schemas[:1]) == out[:1]
    assert len(server.requests) == n + 1

    off = load_lm(spec(server, structured_output=False), cache_dir=None)
    assert off.generate(["p3"], max_new_tokens=32, json_schemas=schemas[:1])[0].text.startswith("echo: p3")
    comp = load_lm(spec(server, mode="completions"), cache_dir=None)
    comp.generate(["p4"], max_new_tokens=32, json_schemas=schemas[:1])
    assert all("response_format" not in body for _, body, _ in server.requests[n + 1:])
    responses = load_lm(spec(server, mode="responses", logprobs=False), cache_dir=None)
    responses.generate(["p5"], max_new_tokens=32, json_schemas=schemas[1:])
    assert server.requests[-1][1]["text"] == {"format": {
        "type": "json_schema", "name": "reply", "schema": schemas[1], "strict": True}}


def test_read_generation_keeps_length_and_content_filter_finish_reasons(server):
    """A cut reply must say so (LCAE counts it as truncated) and a filtered one too (the judge
    reads it as a refusal), on every endpoint shape."""
    lm = load_lm(spec(server), cache_dir=None)
    chat = {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": None}], "usage": {}}
    for given, ours in (("length", "length"), ("content_filter", "content_filter"), ("stop", "stop"),
                        ("tool_calls", "stop")):
        chat["choices"][0]["finish_reason"] = given
        assert lm.read_generation(chat, "/chat/completions", 0)["finish_reason"] == ours
    resp = {"status": "incomplete", "output": [], "usage": {}}
    for given, ours in (("max_output_tokens", "length"), ("content_filter", "content_filter"), (None, "stop")):
        resp["incomplete_details"] = {"reason": given}
        assert lm.read_generation(resp, "/responses", 0)["finish_reason"] == ours
