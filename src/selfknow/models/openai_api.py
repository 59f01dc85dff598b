"""`openai` backend: any OpenAI-compatible HTTP endpoint (hosted APIs, vLLM, llama.cpp,
`transformers serve`) through httpx (SPEC §0.4).

Requests run in a thread pool of `max_concurrency`; a request that fails with 429, a 5xx, a
timeout or a connection error is retried `max_retries` times with exponential backoff and
jitter (the jitter is seeded by (seed, request index, attempt), so reruns wait alike), honouring
`Retry-After`; then a `RequestFailed` names the model, endpoint and request index. Other 4xx
answers fail at once. The API key comes from the environment variable named by `api_key_env`.

Log-probabilities exist only if the spec says the server gives them (`logprobs: true`) and the
answer carries them; otherwise `LogprobsUnavailable` names the model and method. Candidates
outside the server's top-`top_logprobs` list get -inf (an API exposes no more). `loglikelihood`
uses completions with `echo` (`echo_logprobs: true`, as vLLM supports); llama.cpp's echo is off
by one token, so it must not be switched on there.
"""
from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from selfknow.models.base import LM, CallStats, Generation, LogprobsUnavailable
from selfknow.models.cache import CachedCalls, PartialFailure
from selfknow.models.registry import ModelSpecError, UnsupportedCall, register_backend

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429} | set(range(500, 600))


class RequestFailed(RuntimeError):
    """An HTTP request still failed after all retries (or failed with a non-retryable
    status)."""


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@register_backend("openai")
class OpenAILM(LM):
    """A model behind an OpenAI-compatible endpoint (see module docstring)."""

    def __init__(self, spec: dict, checkpoint: dict, *, cache_dir=None, adapter=None):
        if adapter is not None:
            raise ModelSpecError(f"model {spec['name']!r}: the openai backend cannot load a "
                                 f"LoRA adapter ({adapter!r}); serve it instead")
        self.spec, self.name = spec, spec["name"]
        self.model_id = spec["model"]
        self.revision = checkpoint.get("revision")
        self.adapter = None
        self.stats = CallStats()
        self.base_url = spec["base_url"].rstrip("/")
        self.mode = spec.get("mode", "chat")
        self.max_concurrency = int(spec.get("max_concurrency", 4))
        self.max_retries = int(spec.get("max_retries", 5))
        self.timeout_s = float(spec.get("timeout_s", 60))
        self.backoff_s = float(spec.get("backoff_s", 1.0))
        self.max_backoff_s = float(spec.get("max_backoff_s", 60.0))
        self.seed = int(spec.get("seed", 0))
        self.top_logprobs = int(spec.get("top_logprobs", 20))
        self.has_logprobs = bool(spec.get("logprobs", False))
        self.echo_logprobs = bool(spec.get("echo_logprobs", False))
        self.chat_default = bool(spec.get("chat", self.mode == "chat"))
        key_env = spec.get("api_key_env")
        self.api_key = None
        if key_env:
            self.api_key = os.environ.get(key_env)
            if not self.api_key:
                raise ModelSpecError(f"model {self.name!r}: environment variable {key_env!r} "
                                     f"(key 'api_key_env') is not set")
        self._client = None
        self._client_lock = threading.Lock()
        self._calls = CachedCalls(cache_dir, self._identity, self.stats)
        #: real HTTP requests sent (attempts, retries included); tests read it
        self.http_requests = 0

    def _identity(self) -> dict:
        # base_url is left out on purpose: the same served model on another node or port
        # (a vLLM job on a new cluster node) must hit the same cache entries
        return {"backend": "openai", "model_id": self.model_id, "revision": self.revision,
                "adapter": None}

    # ---- HTTP --------------------------------------------------------------------------
    @property
    def client(self):
        import httpx

        with self._client_lock:
            if self._client is None:
                headers = {"Content-Type": "application/json"}
                if self.api_key:
                    headers["Authorization"] = f"Bearer {self.api_key}"
                self._client = httpx.Client(
                    base_url=self.base_url, headers=headers, timeout=self.timeout_s,
                    limits=httpx.Limits(max_connections=self.max_concurrency))
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _post(self, endpoint: str, body: dict, index: int) -> dict:
        """POST with retries (module docstring); `index` is the request's position in its
        batch, for the error message and the seeded jitter."""
        import httpx

        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            wait = None
            try:
                with self._client_lock:
                    self.http_requests += 1
                resp = self.client.post(endpoint, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if resp.status_code < 300:
                    try:
                        return resp.json()
                    except ValueError:
                        last = f"invalid JSON in response: {resp.text[:200]!r}"
                else:
                    last = f"HTTP {resp.status_code}: {resp.text[:300]!r}"
                    if resp.status_code not in _RETRY_STATUS:
                        break
                    wait = _retry_after(resp.headers.get("retry-after"))
            if attempt == self.max_retries:
                break
            if wait is None:
                rng = random.Random(f"{self.seed}:{index}:{attempt}")
                wait = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
                wait *= 0.5 + rng.random()  # jitter in [0.5, 1.5): jobs don't retry in step
            log.info("model %r %s request %d: %s; retry %d in %.2fs", self.name, endpoint,
                     index, last, attempt + 1, wait)
            time.sleep(min(wait, self.max_backoff_s))
        raise RequestFailed(f"model {self.name!r}: POST {self.base_url}{endpoint} request "
                            f"{index} failed after {attempt + 1} attempt(s): {last}")

    def _map(self, fn: Callable[[int], Any], idx: Sequence[int]) -> list[Any]:
        """fn over the request indices `idx`, `max_concurrency` at a time. If any fails, the
        others still finish and are cached (PartialFailure); the first error is raised."""
        workers = max(1, min(self.max_concurrency, len(idx)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(fn, i) for i in idx]
        done, error = {}, None
        for j, fut in enumerate(futures):
            exc = fut.exception()
            if exc is None:
                done[j] = fut.result()
            elif error is None:
                error = exc
        if error is not None:
            raise PartialFailure(done, error)
        return [done[j] for j in range(len(idx))]

    # ---- request bodies ----------------------------------------------------------------
    def _body(self, prompt: str, *, chat: bool, system: str | None, max_tokens: int,
              temperature: float, stop: Sequence[str] | None,
              sample_index: int) -> tuple[str, dict]:
        body: dict[str, Any] = {"model": self.model_id, "max_tokens": int(max_tokens),
                                "temperature": float(temperature)}
        if stop:
            body["stop"] = list(stop)
        if temperature > 0:
            body["seed"] = int(self.seed + sample_index)
        if chat:
            if self.mode != "chat":
                raise ValueError(f"model {self.name!r}: chat=True needs 'mode: chat' "
                                 f"(the spec says {self.mode!r})")
            msgs = [{"role": "system", "content": system}] if system is not None else []
            msgs.append({"role": "user", "content": prompt})
            body["messages"] = msgs
            return "/chat/completions", body
        if system is not None:
            raise ValueError(f"model {self.name!r}: a system prompt needs chat=True")
        if self.mode == "chat":
            raise ValueError(f"model {self.name!r}: a raw (non-chat) prompt needs "
                             f"'mode: completions'")
        body["prompt"] = prompt
        return "/completions", body

    def _use_chat(self, chat: bool) -> bool:
        return bool(chat) or self.chat_default

    # ---- LM interface ------------------------------------------------------------------
    def generate(self, prompts, *, max_new_tokens, stop=None, chat=False, system=None,
                 temperature=0.0, sample_index=0):
        prompts, stop = list(prompts), list(stop or [])
        use_chat = self._use_chat(chat)
        bodies = [self._body(p, chat=use_chat, system=system, max_tokens=max_new_tokens,
                             temperature=temperature, stop=stop, sample_index=sample_index)
                  for p in prompts]

        def one(i: int) -> dict:
            endpoint, body = bodies[i]
            data = self._post(endpoint, body, i)
            choice = self._choice(data, endpoint, i)
            text = (choice.get("message") or {}).get("content") if use_chat else \
                choice.get("text")
            text = text or ""
            finish = choice.get("finish_reason") or "stop"
            # servers differ on whether the stop string is returned; cut it here
            hits = [text.find(s) for s in stop if s and s in text]
            if hits:
                text, finish = text[:min(hits)], "stop"
            usage = data.get("usage") or {}
            return {"text": text, "tokens_in": int(usage.get("prompt_tokens") or 0),
                    "tokens_out": int(usage.get("completion_tokens") or 0),
                    "finish_reason": "length" if finish == "length" else "stop"}

        params = {"max_new_tokens": int(max_new_tokens), "stop": stop, "chat": use_chat,
                  "system": system, "temperature": float(temperature)}
        out = self._calls.run("generate", [{"prompt": p} for p in prompts], params,
                              lambda idx: self._map(one, idx), sample_index=sample_index)
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

        def one(i: int) -> list[float]:
            endpoint, body = self._body(prompts[i], chat=use_chat, system=None, max_tokens=1,
                                        temperature=0.0, stop=None, sample_index=0)
            if use_chat:
                body.update(logprobs=True, top_logprobs=self.top_logprobs)
            else:
                body["logprobs"] = self.top_logprobs
            data = self._post(endpoint, body, i)
            top = self._top_logprobs(self._choice(data, endpoint, i), use_chat, i)
            return [float(top.get(c, -np.inf)) for c in candidates]

        params = {"candidates": candidates, "chat": use_chat, "top_logprobs": self.top_logprobs}
        out = self._calls.run("next_token_logprobs", [{"prompt": p} for p in prompts], params,
                              lambda idx: self._map(one, idx))
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

        def one(i: int) -> float:
            ctx, cont = pairs[i]
            body = {"model": self.model_id, "prompt": ctx + cont, "max_tokens": 1,
                    "temperature": 0.0, "echo": True, "logprobs": 1}
            data = self._post("/completions", body, i)
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
        return self._calls.run("loglikelihood", payloads, {}, lambda idx: self._map(one, idx))

    def beam_search(self, prompts, *, num_beams, max_new_tokens, stop=("\n",)):
        raise UnsupportedCall(f"model {self.name!r}: the openai backend cannot do beam search "
                              f"(OpenAI-compatible APIs expose no beams); use an hf model")
