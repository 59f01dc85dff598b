"""The `openai` backend against a real local HTTP server (stdlib, 127.0.0.1) that speaks the
OpenAI format and misbehaves on purpose: 429 with Retry-After, 500, a hang past the timeout,
always-failing requests; plus logprobs, echo, concurrency and the request cache."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from selfknow.models import LogprobsUnavailable, ModelSpecError, UnsupportedCall, load_lm
from selfknow.models.openai_api import RequestFailed

TOP = {"A": -0.2, "B": -1.9, " A": -3.0, "7": -4.0}


class FakeServer:
    """OpenAI-compatible server. `failures` is consumed one per request ("429", "500",
    "hang"); a prompt containing FAIL always gets 500, BAD gets 400; `delay` slows every
    answer (to observe concurrency); `give_logprobs=False` ignores the logprobs parameter."""

    def __init__(self):
        self.failures: list[str] = []
        self.requests: list[tuple[str, dict, dict]] = []
        self.delay = 0.0
        self.hang_s = 2.0
        self.give_logprobs = True
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, body, dict(self.headers)))
                    mode = server.failures.pop(0) if server.failures else "ok"
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(mode, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _send(self, code, obj, headers=()):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _answer(self, mode, body):
                text = json.dumps(body)
                if mode == "429":
                    return self._send(429, {"error": "slow down"}, [("Retry-After", "0.3")])
                if mode == "500" or "FAIL" in text:
                    return self._send(500, {"error": "boom"})
                if "BAD" in text:
                    return self._send(400, {"error": "bad request"})
                if mode == "hang":
                    time.sleep(server.hang_s)
                time.sleep(server.delay)
                self._send(200, server.respond(self.path, body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def respond(self, path, body):
        usage = {"prompt_tokens": 11, "completion_tokens": 3}
        want_lp = self.give_logprobs and body.get("logprobs")
        if path.endswith("/chat/completions"):
            user = body["messages"][-1]["content"]
            choice = {"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": f"echo: {user}\nsecond line"}}
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
    server.delay = 0.15
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
