"""How the `openai` backend's requests reach the server (`OpenAILM.transport`).

A transport answers the backend's requests and decides how they travel:

- `post(endpoint, body, index)`: the response body of one request;
- `map(request, fn, idx)`: `fn(i)` (which posts request i) over the request indices `idx`; if
  any fails, the others still finish (`PartialFailure`); `request(i)` is the (endpoint, body)
  `fn(i)` posts, built without sending it;
- `together(calls, uncounted)`: the results of several backend calls, whose requests may travel
  together; `uncounted()` is a context in which the model's cache counts nothing (for a pass
  that only gathers requests);
- `close()`.

`Direct` sends each request as one HTTP request, `max_concurrency` at a time, with the retry
policy of `openai_api`'s module docstring; `openai_batch.Batch` sends a call's requests as Batch
API jobs (`batch: true`), its control calls through a `Direct`.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Callable, Sequence

from selfknow.models.cache import PartialFailure
from selfknow.models.http_retry import RETRY_STATUS, RequestFailed, retry_after

log = logging.getLogger(__name__)


class Direct:
    """Each request one HTTP request (see module docstring)."""

    def __init__(self, spec: dict, api_key: str | None):
        self.name = spec["name"]
        self.base_url = spec["base_url"].rstrip("/")
        self.api_key = api_key
        self.max_concurrency = int(spec["max_concurrency"])
        self.max_retries = int(spec["max_retries"])
        self.timeout_s = float(spec["timeout_s"])
        self.backoff_s = float(spec["backoff_s"])
        self.max_backoff_s = float(spec["max_backoff_s"])
        self.max_retry_after_s = float(spec["max_retry_after_s"])
        self.seed = int(spec["seed"])
        self._client = None
        self._client_lock = threading.Lock()
        #: real HTTP requests sent (attempts, retries included); tests read it
        self.http_requests = 0

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

    def post(self, endpoint: str, body: dict, index: int) -> dict:
        """POST with retries; `index` is the request's position in its call, for the error
        message and the seeded jitter."""
        return self.send("POST", endpoint, index, lambda resp: resp.json(), json=body)

    def send(self, method: str, path: str, index: int | str, decode: Callable[[Any], Any],
             absent: frozenset[int] = frozenset(), **kwargs) -> Any:
        """`decode(response)` of one HTTP request, with retries (module docstring); `index`
        names the request in the error message and seeds the jitter; a ValueError from
        `decode` (invalid JSON) is retried. None if the server answers a status in `absent`
        (404 for an object it does not know), which is an answer, not a failure."""
        import httpx

        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            wait = None
            try:
                with self._client_lock:
                    self.http_requests += 1
                resp = self.client.request(method, path, **kwargs)
            except (httpx.TimeoutException, httpx.TransportError) as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if resp.status_code in absent:
                    return None
                if resp.status_code < 300:
                    try:
                        return decode(resp)
                    except ValueError:
                        last = f"invalid JSON in response: {resp.text[:200]!r}"
                else:
                    last = f"HTTP {resp.status_code}: {resp.text[:300]!r}"
                    if resp.status_code not in RETRY_STATUS:
                        break
                    wait = retry_after(resp.headers.get("retry-after"))
                    if wait is not None and wait > self.max_retry_after_s:
                        last += (f"; the server asks for a retry after {wait:.0f} s (Retry-After), more than "
                                 f"max_retry_after_s = {self.max_retry_after_s:g}")
                        break
            if attempt == self.max_retries:
                break
            if wait is None:
                rng = random.Random(f"{self.seed}:{index}:{attempt}")
                # jitter in [0.5, 1.5): jobs don't retry in step
                wait = min(self.max_backoff_s, self.backoff_s * 2 ** attempt * (0.5 + rng.random()))
            log.info("model %r %s %s request %s: %s; retry %d in %.2fs", self.name, method,
                     path, index, last, attempt + 1, wait)
            time.sleep(wait)
        raise RequestFailed(f"model {self.name!r}: {method} {self.base_url}{path} request "
                            f"{index} failed after {attempt + 1} attempt(s): {last}")

    def map(self, request: Callable[[int], tuple[str, dict]], fn: Callable[[int], Any],
            idx: Sequence[int]) -> list[Any]:
        """fn over the request indices `idx`, `max_concurrency` at a time (each sends its own
        `request`). If any fails, the others still finish and are cached (PartialFailure); the
        first error is raised."""
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

    def together(self, calls: Sequence[Callable[[], Any]],
                 uncounted: Callable[[], AbstractContextManager]) -> list[Any]:
        return [call() for call in calls]
