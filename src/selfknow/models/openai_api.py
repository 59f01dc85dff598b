"""`openai` backend: any OpenAI-compatible HTTP endpoint (hosted APIs, vLLM, llama.cpp,
`transformers serve`) through httpx (SPEC §0.4).

Requests run in a thread pool of `max_concurrency`; a request that fails with 429, a 5xx, a
timeout or a connection error is retried `max_retries` times with exponential backoff and
jitter (the jitter is seeded by (seed, request index, attempt), so reruns wait alike, each wait
at most `max_backoff_s`); a `Retry-After` header is waited for in full up to
`max_retry_after_s`, and a longer one fails the request at once (a retry before the server's
time would be refused again; the job is better rerun later, from its cache). Then a
`RequestFailed` names the model, endpoint and request index. Other 4xx answers fail at once. The API key comes from the environment variable named by `api_key_env`.

Log-probabilities exist only if the spec says the server gives them (`logprobs: true`) and the
answer carries them; otherwise `LogprobsUnavailable` names the model and method. Candidates
outside the server's top-`top_logprobs` list get -inf (an API exposes no more). `loglikelihood`
uses completions with `echo` (`echo_logprobs: true`, as vLLM supports); llama.cpp's echo is off
by one token, so it must not be switched on there.

Structured output: `generate(json_schemas=...)` on a model entry with `structured_output` on
asks for each prompt's schema in the mode its provider profile documents
(selfknow.models.providers): a strict `json_schema` response format (chat) or `text.format`
(responses); else `json_object` with the schema stated in the prompt; else (a provider that
ignores response_format) the schema in the prompt alone. Replies no server constrained are
checked against their schema here and each miss is logged; the callers' parsers count the
unparsable ones as with free text. The legacy completions endpoint gets no format.

Provider rules: the profile's documented output-token cap clips the hidden-reasoning room
(`reasoning_tokens`, our addition) so that no request asks for more than the provider serves;
a stage whose own answer budget exceeds the cap stops before any request (the budget is the
protocol's, so it is not cut silently). A temperature above the provider's maximum, and
`logprobs` on a provider without them, stop likewise.

Request options (`request_options`) shape every body: the endpoint (`mode`: Chat Completions,
Responses or legacy completions), the token-limit parameter (`token_param`), whether temperature
(and a sampling seed) may be sent (`sampling_params`), whether stop strings may be sent
(`send_stop`; they are always cut here too), `reasoning_effort`, and `reasoning_tokens` added to
every token limit for the hidden reasoning a reasoning model spends from the same budget.
`request_preset: openai_reasoning` sets them as OpenAI's reasoning models (o-series, gpt-5 family)
require; an option set on the model entry wins over its preset.

A hosted model may answer the same request differently twice even at temperature 0, so its
repeats (`sample_index`) are separate requests and cache entries at any temperature
(`greedy_deterministic = False`).
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Any, Callable, Sequence

import numpy as np

from selfknow.config import is_chat
from selfknow.models import providers
from selfknow.models.base import (LM, CallStats, Generation, LogprobsUnavailable,
                                  constrained_schemas, structured_output)
from selfknow.models.cache import CachedCalls
from selfknow.models.http_retry import RequestFailed
from selfknow.models.openai_transport import Direct
from selfknow.models.registry import ModelSpecError, UnsupportedCall, register_backend

log = logging.getLogger(__name__)

#: request options of a model entry without them or a preset: a classic chat model
REQUEST_OPTION_DEFAULTS = {"token_param": "max_tokens", "sampling_params": True, "send_stop": True,
                           "reasoning_effort": None, "reasoning_tokens": 0}
#: presets (`request_preset`): request options a family of hosted models requires
REQUEST_PRESETS = {
    # OpenAI reasoning models reject `max_tokens`, any temperature/top_p but the default, and
    # `stop`; their token limit also pays for hidden reasoning tokens. "medium" is the API's own
    # default effort, written out so that it is part of every cache key.
    "openai_reasoning": {"token_param": "max_completion_tokens", "sampling_params": False,
                         "send_stop": False, "reasoning_effort": "medium",
                         "reasoning_tokens": 8192},
}


def request_options(spec: dict) -> dict:
    """The request options of a model entry: each option the entry sets, else its
    `request_preset`'s, else REQUEST_OPTION_DEFAULTS. (Resolved here rather than as schema
    defaults: a filled-in default could not be told from an option the user set over a preset.)"""
    preset = REQUEST_PRESETS[spec["request_preset"]] if "request_preset" in spec else {}
    return {key: spec[key] if key in spec else preset.get(key, default)
            for key, default in REQUEST_OPTION_DEFAULTS.items()}


def _with_response_format(endpoint: str, body: dict, schema: dict, mode: str = "json_schema") -> bool:
    """Ask for a reply within `schema` in the structured-output form of `endpoint` and `mode`
    (a strict JSON schema, as OpenAI, vLLM and llama.cpp's server take it, or JSON mode);
    False for the legacy completions endpoint, which has no standard form (the reply stays
    free text)."""
    if mode == "json_object" and endpoint in ("/chat/completions", "/responses"):
        fmt = {"type": "json_object"}
        if endpoint == "/chat/completions":
            body["response_format"] = fmt
        else:
            body["text"] = {"format": fmt}
        return True
    fmt = {"name": "reply", "schema": schema, "strict": True}
    if endpoint == "/chat/completions":
        body["response_format"] = {"type": "json_schema", "json_schema": fmt}
    elif endpoint == "/responses":
        body["text"] = {"format": {"type": "json_schema", **fmt}}
    else:
        return False
    return True


#: the provider's reason an answer ended -> ours (`Generation.finish_reason`): Chat/Completions
#: `finish_reason`, Responses `incomplete_details.reason`; anything else ended normally
_FINISH = {"length": "length", "max_output_tokens": "length", "content_filter": "content_filter"}

@register_backend("openai")
class OpenAILM(LM):
    """A model behind an OpenAI-compatible endpoint (see module docstring)."""

    greedy_deterministic = False

    def __init__(self, spec: dict, checkpoint: dict, *, cache_dir=None, adapter=None):
        if adapter is not None:
            raise ModelSpecError(f"model {spec['name']!r}: the openai backend cannot load a "
                                 f"LoRA adapter ({adapter!r}); serve it instead")
        self.spec, self.name = spec, spec["name"]
        self.model_id = spec["model"]
        self.revision = checkpoint.get("revision")
        self.adapter = None
        self.stats = CallStats()
        self.mode = spec["mode"]
        self.seed = int(spec["seed"])
        self.top_logprobs = int(spec["top_logprobs"])
        self.has_logprobs = bool(spec["logprobs"])
        self.echo_logprobs = bool(spec["echo_logprobs"])
        self.chat_default = is_chat(spec)
        self.options = request_options(spec)
        self.structured_output = structured_output(spec)
        self.provider = providers.profile_name(spec)
        profile = providers.profile(self.provider)
        self.structured_mode = providers.structured_mode(spec, profile)
        self.output_cap = providers.output_cap(profile, self.model_id)
        self.max_temperature = profile["temperature"].get("max")
        if spec["logprobs"] and not profile["logprobs"]["supported"]:
            raise ModelSpecError(f"model {self.name!r}: 'logprobs: true', and its provider profile "
                                 f"{self.provider!r} documents no log-probabilities ({providers.TABLE.name}, "
                                 f"source {profile['logprobs']['source']!r})")
        key_env = spec.get("api_key_env")
        api_key = None
        if key_env:
            api_key = os.environ.get(key_env)
            if not api_key:
                raise ModelSpecError(f"model {self.name!r}: environment variable {key_env!r} "
                                     f"(key 'api_key_env') is not set")
        self._calls = CachedCalls(cache_dir, self._identity, self.stats,
                                  greedy_deterministic=self.greedy_deterministic)
        #: how requests reach the server (selfknow.models.openai_transport): one HTTP request
        #: each, or with `batch: true` a call's requests as Batch API jobs
        self.transport = Direct(spec, api_key)
        if spec["batch"]:
            from selfknow.models.openai_batch import Batch

            self.transport = Batch(self.transport, spec, cache_dir)

    def identity(self) -> dict:
        return self._calls.identity

    def _identity(self) -> dict:
        # base_url is left out on purpose: the same served model on another node or port
        # (a vLLM job on a new cluster node) must hit the same cache entries
        request = {"mode": self.mode, **self.options}
        if self.output_cap is not None:
            request["output_cap"] = self.output_cap  # a clipped limit is another request
        return {"backend": "openai", "model_id": self.model_id, "revision": self.revision,
                "adapter": None, "request": request}

    # ---- transport ---------------------------------------------------------------------
    @property
    def http_requests(self) -> int:
        """Real HTTP requests sent (attempts, retries included); tests read it."""
        return self.transport.http_requests

    def close(self) -> None:
        self.transport.close()

    def _post(self, endpoint: str, body: dict, index: int) -> dict:
        return self.transport.post(endpoint, body, index)

    def _map(self, request: Callable[[int], tuple[str, dict]], read: Callable[[int, str, dict], Any],
             idx: Sequence[int]) -> list[Any]:
        """`read(i, endpoint, response body)` of each request i in `idx`, `request(i)` being its
        (endpoint, body): built apart from read, so a transport can collect requests unsent."""
        def one(i: int) -> Any:
            endpoint, body = request(i)
            return read(i, endpoint, self._post(endpoint, body, i))

        return self.transport.map(request, one, idx)

    def together(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        return self.transport.together(calls, self._uncounted)

    @contextmanager
    def _uncounted(self):
        """Calls inside count no cache hits or misses."""
        saved = (self.stats.hits, self.stats.misses)
        try:
            yield
        finally:
            self.stats.hits, self.stats.misses = saved

    # ---- request bodies ----------------------------------------------------------------
    def request_body(self, prompt: str, *, chat: bool, system: str | None, max_tokens: int,
                     temperature: float, stop: Sequence[str] | None,
                     sample_index: int) -> tuple[str, dict]:
        """(endpoint, JSON body) of one request for `prompt`, shaped by the model's request
        options (module docstring); `max_tokens` is the visible answer's budget."""
        opts = self.options
        limit = int(max_tokens) + int(opts["reasoning_tokens"])
        if self.output_cap is not None:
            if int(max_tokens) > self.output_cap:
                raise ModelSpecError(
                    f"model {self.name!r}: a stage asks for {int(max_tokens)} output tokens, above the "
                    f"{self.output_cap} its provider ({self.provider}) serves ({providers.TABLE.name}); "
                    f"lower that stage's max_new_tokens")
            limit = min(limit, self.output_cap)
        if self.max_temperature is not None and opts["sampling_params"] and temperature > self.max_temperature:
            raise ModelSpecError(f"model {self.name!r}: temperature {temperature} is above the "
                                 f"{self.max_temperature} its provider ({self.provider}) takes")
        body: dict[str, Any] = {"model": self.model_id}
        if opts["sampling_params"]:
            body["temperature"] = float(temperature)
        if chat and self.mode == "responses":
            # the Responses API takes no stop strings and no seed: stops are cut from the text
            body["input"] = prompt
            if system is not None:
                body["instructions"] = system
            body["max_output_tokens"] = limit
            if opts["reasoning_effort"] is not None:
                body["reasoning"] = {"effort": opts["reasoning_effort"]}
            return "/responses", body
        if stop and opts["send_stop"]:
            body["stop"] = list(stop)
        if temperature > 0 and opts["sampling_params"]:
            body["seed"] = int(self.seed + sample_index)
        if chat:
            if self.mode == "completions":
                raise ValueError(f"model {self.name!r}: chat=True needs 'mode: chat' or "
                                 f"'mode: responses' (the spec says 'completions')")
            msgs = [{"role": "system", "content": system}] if system is not None else []
            msgs.append({"role": "user", "content": prompt})
            body["messages"] = msgs
            body[opts["token_param"]] = limit
            if opts["reasoning_effort"] is not None:
                body["reasoning_effort"] = opts["reasoning_effort"]
            return "/chat/completions", body
        if system is not None:
            raise ValueError(f"model {self.name!r}: a system prompt needs chat=True")
        if self.mode != "completions":
            raise ValueError(f"model {self.name!r}: a raw (non-chat) prompt needs "
                             f"'mode: completions'")
        body["prompt"] = prompt
        body["max_tokens"] = limit  # the legacy endpoint knows no other name
        return "/completions", body

    def read_generation(self, data: dict, endpoint: str, i: int) -> dict:
        """{text, tokens_in, tokens_out, finish_reason} of one answer of `endpoint`'s shape."""
        if endpoint == "/responses":
            output = data.get("output")
            if data.get("status") == "failed" or not isinstance(output, list):
                raise RequestFailed(f"model {self.name!r}: {endpoint} request {i}: no output: "
                                    f"{str(data)[:300]}")
            # reasoning items carry no text; the answer is the message items' output_text parts
            text = "".join(part.get("text") or "" for item in output
                           if item.get("type") == "message"
                           for part in item.get("content") or []
                           if part.get("type") == "output_text")
            why = (data.get("incomplete_details") or {}).get("reason")
            usage = data.get("usage") or {}
            return {"text": text, "tokens_in": int(usage.get("input_tokens") or 0),
                    "tokens_out": int(usage.get("output_tokens") or 0),
                    "finish_reason": _FINISH.get(why, "stop")}
        choice = self._choice(data, endpoint, i)
        text = (choice.get("message") or {}).get("content") if endpoint == "/chat/completions" \
            else choice.get("text")
        usage = data.get("usage") or {}
        return {"text": text or "", "tokens_in": int(usage.get("prompt_tokens") or 0),
                "tokens_out": int(usage.get("completion_tokens") or 0),
                "finish_reason": _FINISH.get(choice.get("finish_reason"), "stop")}

    def _use_chat(self, chat: bool) -> bool:
        return bool(chat) or self.chat_default

    # ---- LM interface ------------------------------------------------------------------
    def generate(self, prompts, *, max_new_tokens, stop=None, chat=False, system=None,
                 temperature=0.0, sample_index=0, json_schemas=None):
        prompts, stop = list(prompts), list(stop or [])
        use_chat = self._use_chat(chat)
        schemas = constrained_schemas(prompts, json_schemas, self.structured_output)
        mode = self.structured_mode
        sent = list(prompts)
        if schemas is not None and mode != "json_schema" and use_chat:
            sent = [providers.with_schema_instruction(p, s) for p, s in zip(prompts, schemas)]
        bodies = [self.request_body(p, chat=use_chat, system=system, max_tokens=max_new_tokens,
                                    temperature=temperature, stop=stop, sample_index=sample_index)
                  for p in sent]
        payloads = [{"prompt": p} for p in prompts]
        checked = [None] * len(prompts)
        if schemas is not None:
            for i, ((endpoint, body), payload, schema) in enumerate(zip(bodies, payloads, schemas)):
                if mode == "prompt" and use_chat or _with_response_format(endpoint, body, schema, mode):
                    payload["json_schema"] = schema  # a constrained reply is another request
                    if mode != "json_schema":
                        payload["json_mode"] = mode
                        checked[i] = schema

        def read(i: int, endpoint: str, data: dict) -> dict:
            out = self.read_generation(data, endpoint, i)
            if checked[i] is not None:
                miss = providers.reply_error(out["text"], checked[i])
                if miss:
                    log.warning("model %r request %d: the %s reply is outside its JSON schema: %s",
                                self.name, i, mode, miss)
            # servers differ on whether the stop string is returned; cut it here
            hits = [out["text"].find(s) for s in stop if s and s in out["text"]]
            if hits:
                out.update(text=out["text"][:min(hits)], finish_reason="stop")
            return out

        params = {"max_new_tokens": int(max_new_tokens), "stop": stop, "chat": use_chat,
                  "system": system, "temperature": float(temperature)}
        out = self._calls.run("generate", payloads, params,
                              lambda idx: self._map(bodies.__getitem__, read, idx), sample_index=sample_index)
        return [Generation(**o) for o in out]

    def _choice(self, data: dict, endpoint: str, i: int) -> dict:
        try:
            return data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise RequestFailed(f"model {self.name!r}: {endpoint} request {i}: answer has no "
                                f"choices: {str(data)[:300]}") from None

    def _need_logprobs(self, method: str) -> None:
        if not self.has_logprobs:
            raise LogprobsUnavailable(
                f"model {self.name!r}: {method} needs log-probabilities, and the spec does not "
                f"say the server gives them (set 'logprobs: true' if it does)")

    def next_token_logprobs(self, prompts, candidates, *, chat=False):
        self._need_logprobs("next_token_logprobs")
        prompts, candidates = list(prompts), list(candidates)
        use_chat = self._use_chat(chat)

        def request(i: int) -> tuple[str, dict]:
            endpoint, body = self.request_body(prompts[i], chat=use_chat, system=None,
                                               max_tokens=1, temperature=0.0, stop=None,
                                               sample_index=0)
            if use_chat:
                body.update(logprobs=True, top_logprobs=self.top_logprobs)
            else:
                body["logprobs"] = self.top_logprobs
            return endpoint, body

        def read(i: int, endpoint: str, data: dict) -> list[float]:
            top = self._top_logprobs(self._choice(data, endpoint, i), use_chat, i)
            return [float(top.get(c, -np.inf)) for c in candidates]

        params = {"candidates": candidates, "chat": use_chat, "top_logprobs": self.top_logprobs}
        out = self._calls.run("next_token_logprobs", [{"prompt": p} for p in prompts], params,
                              lambda idx: self._map(request, read, idx))
        return np.asarray(out, dtype=float).reshape(len(prompts), len(candidates))

    def _top_logprobs(self, choice: dict, chat: bool, i: int) -> dict[str, float]:
        """{token: logprob} of the first generated position, from either answer format."""
        lp = choice.get("logprobs")
        try:
            if chat:
                entries = lp["content"][0]["top_logprobs"]
                top = {e["token"]: float(e["logprob"]) for e in entries}
            else:
                top = {t: float(v) for t, v in lp["top_logprobs"][0].items()}
        except (KeyError, IndexError, TypeError, AttributeError):
            top = {}
        if not top:
            raise LogprobsUnavailable(
                f"model {self.name!r}: next_token_logprobs request {i}: the server's answer "
                f"carries no top_logprobs (it ignores the logprobs parameter); "
                f"set 'logprobs: false' for this model")
        return top

    def loglikelihood(self, pairs):
        if not self.echo_logprobs:
            raise LogprobsUnavailable(
                f"model {self.name!r}: loglikelihood needs prompt log-probabilities via "
                f"completions with echo; set 'echo_logprobs: true' only for servers that "
                f"support it correctly (vLLM; not llama.cpp)")
        self._need_logprobs("loglikelihood")
        pairs = [(str(c), str(x)) for c, x in pairs]

        def request(i: int) -> tuple[str, dict]:
            ctx, cont = pairs[i]
            endpoint, body = self.request_body(ctx + cont, chat=False, system=None,
                                               max_tokens=1, temperature=0.0, stop=None,
                                               sample_index=0)
            body.update(echo=True, logprobs=1)
            return endpoint, body

        def read(i: int, endpoint: str, data: dict) -> float:
            ctx = pairs[i][0]
            lp = self._choice(data, "/completions", i).get("logprobs") or {}
            offsets, token_lps = lp.get("text_offset"), lp.get("token_logprobs")
            if not offsets or not token_lps:
                raise LogprobsUnavailable(
                    f"model {self.name!r}: loglikelihood request {i}: the server's echo answer "
                    f"has no token_logprobs/text_offset")
            # the continuation starts at the first token beginning at or after len(context);
            # the last token is the one generated token, not part of the prompt
            start = next((j for j, o in enumerate(offsets) if o >= len(ctx)), len(offsets))
            vals = token_lps[start:-1]
            if not vals or any(v is None for v in vals):
                raise LogprobsUnavailable(f"model {self.name!r}: loglikelihood request {i}: "
                                          f"no log-probabilities for the continuation")
            return float(sum(vals))

        payloads = [{"context": c, "continuation": x} for c, x in pairs]
        return self._calls.run("loglikelihood", payloads, {}, lambda idx: self._map(request, read, idx))

    def beam_search(self, prompts, *, num_beams, max_new_tokens, stop=("\n",)):
        raise UnsupportedCall(f"model {self.name!r}: the openai backend cannot do beam search "
                              f"(OpenAI-compatible APIs expose no beams); use an hf model")
