"""An OpenAI-compatible HTTP server on 127.0.0.1 standing in for every API model and the judge
of a config (the rehearsal; tests).

It serves Chat Completions, the Responses API and legacy completions, for the model names it
is given (others get 404, as a wrong model name does on a real endpoint), and keeps the rules
where exact API behaviour matters:

- reasoning models (`reasoning`: OpenAI's o-series and gpt-5 family) answer HTTP 400, worded
  as OpenAI words it, to `max_tokens`, `stop` and, while they reason, a non-default
  `temperature`/`top_p` (`reasoning_rule_violation`), and spend `reasoning_spend` hidden tokens
  from the token limit before the answer: a limit without room to reason gives an empty answer
  cut at "length". GPT-5.1 and later reason only when asked (`reasoning_effort`, `reasoning.effort`
  other than "none"), and otherwise take a temperature (`reasons`);
- OpenAI's files and batches endpoints (`selfknow.rehearsal.batches`), each line answered as
  its synchronous request would be;
- a strict `json_schema` response format gets an instance of the schema, a non-strict one
  HTTP 400 (`schema_instance`);
- `logprobs` gets next-token `top_logprobs` (chat) or `logprobs` (completions);
- a judge request (numbered candidate answers, `selfknow.stages.judge.candidates_prompt`) gets one
  "k. X" line per candidate, X in R/W/N; a few requests get a refusal or a reply in words
  instead, which the workflow must count, never drop;
- an LCAE Stage-1 answer is, for 8 requests in 100, a hedge with no final answer and, for 8 in
  100, reasoning longer than any token budget (cut, `finish_reason` "length"), which the
  LCAE table notes must count.

Answers are deterministic functions of the request (a seeded hash of model, prompt and sample
seed picks the option, the probability, the label), so a rerun is answered identically.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selfknow.stages.judge import normalise_answer

from . import provider_rules
from .batches import BatchStore

#: hidden reasoning tokens a reasoning model spends before its answer
REASONING_SPEND = 64
_OPTION = re.compile(r"^\s*\(?([A-J])[.)]\s", re.MULTILINE)
_CANDIDATE = re.compile(r"^(\d+)\. (.*)$", re.MULTILINE)
#: LCAE Stage-1 prompts (`protocols/lcae/prompts/`) ask for one of these final-answer forms
_LCAE_STAGE1_FORMS = ('"Answer: X"', '"So the final answer is: X"')
#: repeats of a reasoning sentence (7 tokens) in a reply longer than any budget of the configs
_RAMBLE = 2000
_REFERENCE = re.compile(r"^(?:Ground-truth answer|Reference ground-truth answers): (.*)$", re.MULTILINE)


_NO_REASONING_BY_DEFAULT = re.compile(r"^gpt-5\.[1-9]")


def reasons(model: str, body: dict) -> bool:
    """Whether a request makes an OpenAI reasoning model reason: its effort, else the model's
    default, which is "none" from GPT-5.1 on and "medium" before (OpenAI API reference,
    `reasoning.effort`: "gpt-5.1 defaults to none ... All models before gpt-5.1 default to
    medium")."""
    effort = body.get("reasoning_effort", (body.get("reasoning") or {}).get("effort"))
    if effort is None:
        return not _NO_REASONING_BY_DEFAULT.match(model)
    return effort != "none"


def reasoning_rule_violation(path: str, body: dict) -> tuple[str, str] | None:
    """(param, message) of the first rule an OpenAI reasoning model (o-series, gpt-5 family)
    answers with HTTP 400, as OpenAI words it; None if the body keeps them all. Sampling
    parameters are refused only while the model reasons (`reasons`: OpenAI's "latest model"
    guide, GPT-5.1 parameter compatibility)."""
    if path.endswith("/chat/completions"):
        if "max_tokens" in body:
            return "max_tokens", ("Unsupported parameter: 'max_tokens' is not supported with this "
                                  "model. Use 'max_completion_tokens' instead.")
        if "stop" in body:
            return "stop", "Unsupported parameter: 'stop' is not supported with this model."
    for param in ("temperature", "top_p"):
        if param in body and body[param] != 1 and reasons(str(body.get("model")), body):
            return param, (f"Unsupported value: '{param}' does not support {body[param]!r} with this "
                           f"model. Only the default (1) value is supported.")
    return None


def schema_instance(fmt: dict, unit=None) -> dict:
    """What a server honouring a strict `json_schema` response format answers: an instance of
    the (flat) schema. `unit(key)` in [0, 1) picks each value (a number within its bounds, an
    enum member); without it numbers are mid-range and enums their last value. A schema
    OpenAI's strict mode refuses (a key not required, or other keys allowed) raises, as the
    server's HTTP 400 would."""
    schema = fmt["schema"]
    props = schema["properties"]
    if not fmt.get("strict") or sorted(schema["required"]) != sorted(props) \
            or schema.get("additionalProperties") is not False:
        raise ValueError(f"not a strict schema: {fmt}")
    out = {}
    for k, v in props.items():
        u = unit(k) if unit else None
        if "enum" in v:
            out[k] = v["enum"][-1] if u is None else v["enum"][int(u * len(v["enum"]))]
        else:
            lo, hi = v.get("minimum", 0), v.get("maximum", 1)
            out[k] = (lo + hi) / 2 if u is None else round(lo + u * (hi - lo), 3)
    return out


def send_json(handler: BaseHTTPRequestHandler, code: int, obj, headers=()) -> None:
    """Answer the request `handler` serves with HTTP `code` and `obj` as JSON (bytes as they
    are: a file's content); a client that hung up (after its own timeout) is no error of the
    server's."""
    binary = isinstance(obj, bytes)
    data = obj if binary else json.dumps(obj).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/octet-stream" if binary else "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for k, v in headers:
        handler.send_header(k, v)
    handler.end_headers()
    try:
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log every request to stderr."""

    def log_message(self, *args):
        pass


def serve(handler: type[BaseHTTPRequestHandler], port: int = 0) -> tuple[ThreadingHTTPServer, str, threading.Thread]:
    """Serve `handler` on 127.0.0.1:`port` (0: a free port) from a daemon thread: the server,
    its OpenAI-style base URL (".../v1") and the thread."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1", thread


def _unit(*parts) -> float:
    """A number in [0, 1) determined by `parts`."""
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2 ** 64


def judge_reply(prompt: str, key: str) -> str | None:
    """The reply to a judge request (see the module docstring), None if `prompt` is not one.
    A candidate equal to a reference after normalisation is right; others are R, W or N by
    the hash; 4 requests in 100 are refused and 3 in 100 answered in words, not R/W/N."""
    if "Candidate answers:\n" not in prompt:
        return None
    head, listed = prompt.split("Candidate answers:\n", 1)
    ref = _REFERENCE.search(head)
    refs = {normalise_answer(ref.group(1))} if ref else set()
    odd = _unit(key, "odd")
    if odd < 0.04:
        return "Sorry, I cannot judge these answers."
    lines = []
    for k, cand in _CANDIDATE.findall(listed):
        u = _unit(key, k, cand)
        label = "R" if normalise_answer(cand) in refs or u < 0.35 else ("N" if u > 0.92 else "W")
        lines.append(f"{k}. {'right' if odd < 0.07 else label}")
    return "\n".join(lines)


def text_reply(prompt: str, key: str) -> str:
    """A reply to any other prompt that the workflow's parsers read: a probability for a
    "number between 0 and 100" question, Fast/Slow for the LCAE route, else an option letter
    (among the prompt's options, A-D without any) with a confidence: a whole percentage where
    the prompt asks for 0-100 (LADDER's authors' answer format), else a probability; a ReAct
    agent step (LADDER Table 34) gets a thought and a calculate or finish action."""
    u = _unit(key)
    if "finish[letter]" in prompt:
        letters = sorted(set(_OPTION.findall(prompt))) or list("ABCD")
        if u < 0.3:
            return f"Thought: I should compute first.\nAction: calculate[{int(u * 100)} * 3]"
        return f"Thought: I can answer.\nAction: finish[{letters[int(_unit(key, 'letter') * len(letters))]}]"
    if "number between 0 and 100" in prompt:
        return str(int(u * 101))
    if "Fast or Slow" in prompt:
        return "Fast" if u < 0.5 else "Slow"
    letters = sorted(set(_OPTION.findall(prompt))) or list("ABCD")
    if any(form in prompt for form in _LCAE_STAGE1_FORMS):
        # as real examinees do, some hedge with no final answer and some reason past the limit
        odd = _unit(key, "lcae")
        if odd < 0.08:
            return "I am not sure."
        if odd < 0.16:
            return "Let me reason step by step. " * _RAMBLE + f"Answer: {letters[0]}"
    conf = int(_unit(key, 'conf') * 101) if "Confidence: [0-100]" in prompt else round(_unit(key, 'conf'), 2)
    return f"Answer: {letters[int(u * len(letters))]}\nConfidence: {conf}"


class StandInServer:
    """The server (see the module docstring), running in a daemon thread from construction
    until `close()`. `models`: the model names served; `reasoning`: those with the reasoning
    rules. `port` 0 picks a free port (see `url`). `providers` maps a model name to its provider
    profile, whose rules `provider_rules` enforces."""

    def __init__(self, models, reasoning=(), *, port: int = 0, reasoning_spend: int = REASONING_SPEND,
                 providers=None):
        self.models, self.reasoning = set(models), set(reasoning)
        self.providers = dict(providers or {})
        self.reasoning_spend = reasoning_spend
        self.requests = 0
        self.lock = threading.Lock()
        # a batch line is answered as its request would be
        self.batch_api = BatchStore(lambda url, body, cid: self.respond(url, body))
        server = self

        class Handler(QuietHandler):
            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "owned_by": "rehearsal"} for m in sorted(server.models)]})
                with server.lock:
                    routed = server.batch_api.route("GET", self.path, None, b"")
                self._send(*(routed or (404, {"error": {"message": f"no route {self.path}"}})))

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path in ("/v1/files", "/v1/batches"):
                    with server.lock:
                        return self._send(*server.batch_api.route("POST", self.path, self.headers.get("Content-Type"),
                                                                  raw))
                try:
                    body = json.loads(raw)
                except (ValueError, TypeError):
                    return self._send(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
                with server.lock:
                    server.requests += 1
                code, obj = server.respond(self.path, body)
                self._send(code, obj)

            def _send(self, code, obj):
                send_json(self, code, obj)

        self.httpd, self.url, self.thread = serve(Handler, port)

    @staticmethod
    def _error(code: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        return code, {"error": {"message": message, "type": kind, "param": param, "code": None}}

    def respond(self, path: str, body: dict) -> tuple[int, dict]:
        """(HTTP status, JSON body) of one POST."""
        model = body.get("model")
        if model not in self.models:
            return self._error(404, f"The model '{model}' does not exist", "model")
        reasoning = model in self.reasoning and reasons(model, body)
        broken = reasoning_rule_violation(path, body) if model in self.reasoning else None
        if broken:
            return self._error(400, broken[1], broken[0])
        broken = provider_rules.violation(self.providers.get(model), model, path, body)
        if broken:
            return self._error(400, broken[1], broken[0])
        if path.endswith("/chat/completions"):
            prompt = "\n".join(str(m.get("content", "")) for m in body["messages"])
            fmt = (body.get("response_format") or {}).get("json_schema")
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
        elif path.endswith("/responses"):
            prompt = f"{body.get('instructions') or ''}\n{body['input']}"
            fmt = ((body.get("text") or {}).get("format") or {})
            fmt = fmt if fmt.get("type") == "json_schema" else None
            limit = body.get("max_output_tokens")
        elif path.endswith("/completions"):
            prompt, fmt, limit = body["prompt"], None, body.get("max_tokens")
        else:
            return self._error(404, f"no route {path}")
        key = f"{model}\0{body.get('seed')}\0{prompt}"
        fmt = fmt or provider_rules.prompt_format(prompt)
        if fmt is not None:
            try:
                text = json.dumps(schema_instance(fmt, lambda k: _unit(key, k)))
            except (KeyError, ValueError) as err:
                return self._error(400, f"Invalid schema for response_format: {err}", "response_format")
        else:
            text = judge_reply(prompt, key) or text_reply(prompt, key)
        spent = (self.reasoning_spend if reasoning else 0) + max(1, len(text) // 4)
        fits = limit is None or spent <= limit
        if not fits:
            text, spent = "", limit
        usage = {"prompt_tokens": max(1, len(prompt) // 4), "completion_tokens": spent}
        if path.endswith("/responses"):
            return 200, self._responses(body, text, fits, usage, reasoning)
        choice = {"index": 0, "finish_reason": "stop" if fits else "length"}
        top = self._top_logprobs(key, prompt, body) if body.get("logprobs") else None
        if path.endswith("/chat/completions"):
            choice["message"] = {"role": "assistant", "content": text}
            if top is not None:
                first = max(top, key=top.get)
                choice["logprobs"] = {"content": [{"token": first, "logprob": top[first], "top_logprobs": [
                    {"token": t, "logprob": v} for t, v in top.items()]}]}
            return 200, {"id": "chatcmpl-rehearsal", "object": "chat.completion", "model": model,
                         "choices": [choice], "usage": usage}
        choice["text"] = text
        if top is not None:
            first = max(top, key=top.get)
            choice["logprobs"] = {"tokens": [first], "token_logprobs": [top[first]], "top_logprobs": [top]}
        return 200, {"id": "cmpl-rehearsal", "object": "text_completion", "model": model,
                     "choices": [choice], "usage": usage}

    @staticmethod
    def _top_logprobs(key: str, prompt: str, body: dict) -> dict[str, float]:
        """Next-token log-probabilities of the option letters (the prompt's, else A-D) and
        the digits, normalised over them, at most `top_logprobs` (chat) or `logprobs`
        (completions) of them."""
        n = int(body.get("top_logprobs") or body.get("logprobs") or 1)
        tokens = sorted(set(_OPTION.findall(prompt))) or list("ABCD")
        tokens += [str(d) for d in range(10)]
        scores = {t: 4 * _unit(key, "lp", t) for t in tokens}
        norm = math.log(sum(math.exp(s) for s in scores.values()))
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])[:n]
        return {t: s - norm for t, s in ranked}

    @staticmethod
    def _responses(body: dict, text: str, fits: bool, usage: dict, reasoning: bool) -> dict:
        output = [{"type": "reasoning", "id": "rs_rehearsal", "summary": []}] if reasoning else []
        if fits:
            output.append({"type": "message", "id": "msg_rehearsal", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        return {"id": "resp_rehearsal", "object": "response", "model": body["model"],
                "status": "completed" if fits else "incomplete",
                "incomplete_details": None if fits else {"reason": "max_output_tokens"},
                "instructions": body.get("instructions"), "output": output,
                "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}}

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop serving and join the thread (bounded)."""
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.thread.join(timeout_s)
        self.httpd.server_close()
