"""OpenAI Batch API path of the `openai` backend (`batch: true` on a model; issue 14).

The persistent paper's authors judged through the Batch API (half the price, a 24-hour window).
With `batch: true`, the cache misses of one backend call go to the server as one batch job
(or a few, see 2.) instead of one HTTP request each:

1. collect: the backend's request builder (`request(i)`, the (endpoint, body) its per-request
   function posts) runs once per miss; requests are built by the same code as on the
   synchronous path, so both send identical bodies;
2. submit: the requests become one JSONL file per endpoint (`custom_id` = the request's
   index and a hash of endpoint and body; split into files of at most `batch_max_requests`
   lines, OpenAI's limit being 50,000), each uploaded with `POST /files` (purpose "batch")
   and run by `POST /batches`; all are submitted before the first is polled;
3. record: the batch id is written atomically to `<cache_dir>-batches/<job key>.json` before the
   first poll, the job key being the hash of the server and the set of custom ids; a rerun of
   the same job (after a kill, or a `batch_max_wait_s` timeout) finds the record and resumes
   polling that batch instead of submitting (and paying for) a second one;
4. poll `GET /batches/{id}` every `batch_poll_s` seconds until a terminal status, for at most
   `batch_max_wait_s`;
5. download the output and error files (`GET /files/{id}/content`) and match lines by
   `custom_id`. Lines that failed with a retryable status (429, 5xx), with no response (e.g.
   `batch_expired`) or that are missing are resubmitted as a smaller batch, up to
   `max_retries` times; a non-retryable status (400) fails at once, as on the synchronous path;
6. answer: the backend's function runs again per miss, now with `post` returning the batch's
   response body, so parsing and the request cache are exactly those of the synchronous path
   (a later synchronous run finds the answers). Requests that still failed raise
   `RequestFailed` listing every failed request with its error; the others are cached.

Control calls (upload, create, poll, download) use the backend's HTTP retry policy. A call's
records are removed once all its rounds are read; a run killed in the milliseconds between
that and the cache write submits again. A batch that ends `failed` (input rejected) or
`cancelled` raises, and its record goes. Without a cache dir nothing is recorded, so a killed
run cannot resume.
"""
from __future__ import annotations

import json
import logging
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence
from urllib.parse import urlsplit

from selfknow.models.cache import canonical_json, sha256_text
from selfknow.models.http_retry import RETRY_STATUS, RequestFailed
from selfknow.records import atomic_path

if TYPE_CHECKING:
    from selfknow.models.openai_transport import Direct

log = logging.getLogger(__name__)

#: batch statuses after which the server does no more work (OpenAI batch object, `status`)
_TERMINAL = {"completed", "failed", "expired", "cancelled"}


# A call of the backend whose requests `together` only gathers is stopped before it would send
# them (`_Gathered`): the call is the caller's code around the backend's, which has no answer
# to go on with; the exception stops that code, nothing else.
class _Gathered(Exception):
    """Raised by `Batch.prepare` while `Batch.together` gathers requests."""


@dataclass
class _Round:
    """The requests of one backend call (or of one `together`) and what their batches gave."""

    #: custom_id -> (index, endpoint, body)
    requests: dict[str, tuple[int, str, dict]] = field(default_factory=dict)
    #: custom_id -> response body
    answers: dict[str, dict] = field(default_factory=dict)
    #: the message naming every request that failed for good
    failed: str = ""
    #: job keys of the round's batches, whose records go once all are read
    used: list[str] = field(default_factory=list)


def _custom_id(endpoint: str, body: dict, index: int) -> str:
    # the index keeps equal bodies of different cache requests (repeats of a
    # temperature-0 prompt) apart, one line each, as the synchronous path sends each
    return f"{index}-{sha256_text(canonical_json({'endpoint': endpoint, 'body': body}))[:40]}"


class Batch:
    """The transport (selfknow.models.openai_transport) that answers an `OpenAILM`'s requests
    from Batch API jobs (see module docstring); `http` sends the control calls."""

    def __init__(self, http: Direct, spec: dict, cache_dir: str | os.PathLike | None):
        self.http = http
        self.poll_s = float(spec["batch_poll_s"])
        self.max_wait_s = float(spec["batch_max_wait_s"])
        self.window = spec["batch_completion_window"]
        self.max_requests = int(spec["batch_max_requests"])
        cache = None if cache_dir is None else Path(cache_dir).resolve()
        self.records = None if cache is None else cache.with_name(cache.name + "-batches")
        # the JSONL `url` and the batch `endpoint` carry the API's path prefix ("/v1")
        self.prefix = urlsplit(http.base_url).path.rstrip("/")
        #: the current backend call's round, whose answers `post` returns
        self._current = _Round()
        #: `together`'s requests while it gathers them, then its round while its calls are answered
        self._gathering: dict[str, tuple[int, str, dict]] | None = None
        self._together = _Round()

    # ---- the transport ------------------------------------------------------------------
    @property
    def http_requests(self) -> int:
        return self.http.http_requests

    def close(self) -> None:
        self.http.close()

    def map(self, request: Callable[[int], tuple[str, dict]], fn: Callable[[int], Any],
            idx: Sequence[int]) -> list[Any]:
        """Run the requests `request` builds as batch jobs, then `fn` over `idx` answered from them."""
        self.prepare(request, idx)
        return self.http.map(request, fn, idx)

    def prepare(self, request: Callable[[int], tuple[str, dict]], idx: Sequence[int]) -> None:
        """Run the request `request(i)` builds for each i in `idx` as batch jobs (one per
        endpoint); afterwards `post` answers those requests. Inside `together`, the requests
        are only gathered (first pass) or answered from its batches (second pass)."""
        requests: dict[str, tuple[int, str, dict]] = {}
        for i in idx:
            endpoint, body = request(i)
            requests.setdefault(_custom_id(endpoint, body, i), (i, endpoint, body))
        if self._gathering is not None:
            self._gathering.update(requests)
            raise _Gathered
        # inside `together` its batches answered (or failed) every request it gathered
        together = self._together
        self._current = _Round(requests, {cid: together.answers[cid] for cid in requests if cid in together.answers},
                            together.failed)
        self._submit(self._current, {cid: r for cid, r in requests.items() if cid not in together.requests})

    def together(self, calls: Sequence[Callable[[], Any]],
                 uncounted: Callable[[], AbstractContextManager]) -> list[Any]:
        """Run `calls` (each a call of the backend, e.g. one `generate` per budget) with their
        uncached requests in one set of batch jobs, all in flight at once, instead of one
        call's batches after another's: a first pass gathers what each call would send, the
        batches run, and a second pass answers every call from them (all of them, before the
        first failure is raised). A `together` inside a call joins the outer one. The first
        pass runs `uncounted`: the second counts the cache hits and misses."""
        if self._gathering is not None:
            return self._gather_pass(calls)
        if self._together.requests:
            return self._answer_pass(calls)
        self._gathering = {}
        try:
            with uncounted():
                self._gather_pass(calls)
        except _Gathered:
            pass
        finally:
            gathered, self._gathering = self._gathering, None
        self._current = _Round(gathered)
        self._submit(self._current, gathered)
        self._together = self._current
        try:
            return self._answer_pass(calls)
        finally:
            self._together = _Round()

    @staticmethod
    def _run_all(calls: Sequence[Callable[[], Any]], catch: type[Exception]) -> tuple[list[Any], Exception | None]:
        """Every call, in order, the ones raising `catch` skipped: the results and the first such error."""
        results, first = [], None
        for call in calls:
            try:
                results.append(call())
            except catch as err:
                first = first or err
        return results, first

    @classmethod
    def _gather_pass(cls, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Every call, its requests gathered; raises `_Gathered` once all ran if any had some."""
        results, gathered = cls._run_all(calls, _Gathered)
        if gathered is not None:
            raise _Gathered
        return results

    @classmethod
    def _answer_pass(cls, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Every call (so that each one's answers are cached), then its first failure."""
        results, error = cls._run_all(calls, RequestFailed)
        if error is not None:
            raise error
        return results

    def _submit(self, round_: _Round, requests: dict[str, tuple[int, str, dict]]) -> None:
        """Run `requests` (custom_id -> (index, endpoint, body)) as batch jobs, one set per
        endpoint; store the answers in `round_`; name the requests that failed for good in its
        `failed`."""
        by_endpoint: dict[str, dict[str, dict]] = {}
        for cid, (_, endpoint, body) in requests.items():
            by_endpoint.setdefault(endpoint, {})[cid] = body
        failures: dict[str, str] = {}
        for endpoint, bodies in sorted(by_endpoint.items()):
            failures.update(self._run(round_, endpoint, bodies))
        # kept until every round is read, so that a run killed during a resubmission resumes
        # the earlier, finished rounds instead of paying for them again
        for job_key in round_.used:
            self._drop_record(job_key)
        if failures:
            listed = "; ".join(f"request {requests[cid][0]} (custom_id {cid}): {err}"
                               for cid, err in sorted(failures.items(), key=lambda kv: requests[kv[0]][0]))
            round_.failed = (f"model {self.http.name!r}: {len(failures)} of {len(requests)} "
                             f"batch request(s) failed: {listed}")

    def post(self, endpoint: str, body: dict, index: int) -> dict:
        """The response body of one request, from the batch jobs `prepare` ran."""
        cid = _custom_id(endpoint, body, index)
        if cid in self._current.answers:
            return self._current.answers[cid]
        raise RequestFailed(self._current.failed
                            or f"model {self.http.name!r}: request {index} was not part of the batch job")

    # ---- jobs, with resubmission of failed requests ------------------------------------
    def _run(self, round_: _Round, endpoint: str, bodies: dict[str, dict]) -> dict[str, str]:
        """Run `bodies` (custom_id -> body) through the batch API in jobs of at most
        `batch_max_requests`, all submitted before the first is polled; resubmit retryable
        failures up to `max_retries` times; store the answers; return {custom_id: error} of
        the requests that failed for good."""
        pending, final = dict(bodies), {}
        for attempt in range(self.http.max_retries + 1):
            ids = sorted(pending)
            chunks = [{cid: pending[cid] for cid in ids[k:k + self.max_requests]}
                      for k in range(0, len(ids), self.max_requests)]
            jobs = [(chunk, *self._start(round_, endpoint, chunk)) for chunk in chunks]
            errors: dict[str, tuple[bool, str]] = {}
            for chunk, job_key, batch in jobs:
                answers, chunk_errors = self._results(self._poll(batch, job_key), chunk, job_key)
                round_.answers.update(answers)
                errors.update(chunk_errors)
            retry = {cid: pending[cid] for cid, (retryable, _) in errors.items() if retryable}
            final.update({cid: err for cid, (retryable, err) in errors.items()
                          if not retryable or attempt == self.http.max_retries})
            if not retry or attempt == self.http.max_retries:
                break
            log.info("model %r: %d of %d batch request(s) failed; resubmitting them (retry %d "
                     "of %d)", self.http.name, len(retry), len(pending), attempt + 1,
                     self.http.max_retries)
            pending = retry
        return final

    def _start(self, round_: _Round, endpoint: str, bodies: dict[str, dict]) -> tuple[str, dict]:
        """(job key, batch object) of the job over `bodies`: resumed from its record if one
        exists, else uploaded, created and recorded."""
        url = self.prefix + endpoint
        job_key = sha256_text(canonical_json({"base_url": self.http.base_url, "url": url,
                                              "custom_ids": sorted(bodies)}))
        round_.used.append(job_key)
        batch = self._resume(job_key)
        if batch is not None:
            return job_key, batch
        jsonl = "".join(canonical_json({"custom_id": cid, "method": "POST", "url": url,
                                        "body": body}) + "\n"
                        for cid, body in sorted(bodies.items()))
        upload = self._call("POST", "/files", "batch file upload", data={"purpose": "batch"},
                            files={"file": (f"{job_key[:16]}.jsonl", jsonl.encode("utf-8"),
                                            "application/jsonl")},
                            headers={"Content-Type": "multipart/form-data; "
                                                     f"boundary={job_key[:32]}"})
        batch = self._call("POST", "/batches", "batch create",
                           json={"input_file_id": upload["id"], "endpoint": url,
                                 "completion_window": self.window})
        self._write_record(job_key, batch)
        log.info("model %r: submitted batch %s with %d request(s)", self.http.name, batch["id"],
                 len(bodies))
        return job_key, batch

    def _resume(self, job_key: str) -> dict | None:
        """The batch object of a recorded job, or None (no record, or the server no longer
        knows the batch)."""
        path = self._record_path(job_key)
        if path is None or not path.exists():
            return None
        try:
            batch_id = json.loads(path.read_text(encoding="utf-8"))["batch_id"]
        except (ValueError, KeyError, TypeError) as err:
            raise RequestFailed(f"model {self.http.name!r}: batch record {path} is unreadable "
                                f"({err}); delete it to submit the job again") from None
        batch = self._call("GET", f"/batches/{batch_id}", "batch resume", absent=frozenset({404}))
        if batch is None:
            log.warning("model %r: recorded batch %s is unknown to the server; submitting "
                        "again", self.http.name, batch_id)
            return None
        log.info("model %r: resuming batch %s (%s) from %s", self.http.name, batch_id,
                 batch.get("status"), path)
        return batch

    def _poll(self, batch: dict, job_key: str) -> dict:
        deadline = time.monotonic() + self.max_wait_s
        status = None
        while batch.get("status") not in _TERMINAL:
            if batch.get("status") != status:
                status = batch.get("status")
                log.info("model %r: batch %s %s %s", self.http.name, batch["id"], status,
                         batch.get("request_counts"))
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestFailed(
                    f"model {self.http.name!r}: batch {batch['id']} still {batch.get('status')!r} "
                    f"after {self.max_wait_s:g}s (key 'batch_max_wait_s'); rerun to resume it "
                    f"(recorded in {self._record_path(job_key)})")
            time.sleep(min(self.poll_s, left))
            batch = self._call("GET", f"/batches/{batch['id']}", "batch poll")
        return batch

    def _results(self, batch: dict, bodies: dict[str, dict], job_key: str
                 ) -> tuple[dict[str, dict], dict[str, tuple[bool, str]]]:
        """Match the batch's output and error file lines to `bodies` by custom_id: ({custom_id:
        response body}, {custom_id: (retryable, error)})."""
        status = batch["status"]
        if status in ("failed", "cancelled"):
            # a rejected input (validation) or someone's cancel: resubmitting is not ours to
            # decide; the record goes, so a rerun submits afresh
            self._drop_record(job_key)
            raise RequestFailed(f"model {self.http.name!r}: batch {batch['id']} {status}: "
                                f"{json.dumps(batch.get('errors'))[:1000]}")
        answers: dict[str, dict] = {}
        errors: dict[str, tuple[bool, str]] = {}
        for file_id in (batch.get("output_file_id"), batch.get("error_file_id")):
            if not file_id:
                continue
            text = self.http.send("GET", f"/files/{file_id}/content", "batch download",
                                 lambda resp: resp.text)
            for n, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    cid = row["custom_id"]
                except (ValueError, KeyError, TypeError):
                    raise RequestFailed(f"model {self.http.name!r}: batch {batch['id']} file "
                                        f"{file_id} line {n} is not a result line: "
                                        f"{line[:200]!r}") from None
                if cid not in bodies:
                    log.warning("model %r: batch %s file %s line %d: unknown custom_id %r; "
                                "ignored", self.http.name, batch["id"], file_id, n, cid)
                    continue
                response = row.get("response") or {}
                code = response.get("status_code")
                if row.get("error") is None and code is not None and code < 300:
                    answers[cid] = response.get("body")
                else:
                    err = row.get("error") or (response.get("body") or {}).get("error")
                    errors[cid] = (code is None or code in RETRY_STATUS,
                                   f"HTTP {code}: {json.dumps(err)[:300]}" if code is not None
                                   else json.dumps(err)[:300])
        for cid in bodies:
            if cid not in answers and cid not in errors:
                errors[cid] = (True, f"no result in batch {batch['id']} ({status})")
        return answers, errors

    # ---- HTTP and records --------------------------------------------------------------
    def _call(self, method: str, path: str, what: str, **kwargs) -> dict | None:
        """A JSON control call (upload, create, poll), with the backend's retries (`Direct.send`)."""
        return self.http.send(method, path, what, lambda resp: resp.json(), **kwargs)

    def _record_path(self, job_key: str) -> Path | None:
        return None if self.records is None else self.records / f"{job_key}.json"

    def _write_record(self, job_key: str, batch: dict) -> None:
        path = self._record_path(job_key)
        if path is None:
            return
        record = {"batch_id": batch["id"], "input_file_id": batch.get("input_file_id"),
                  "base_url": self.http.base_url, "endpoint": batch.get("endpoint"),
                  "model": self.http.name}
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")

    def _drop_record(self, job_key: str) -> None:
        path = self._record_path(job_key)
        if path is not None:
            path.unlink(missing_ok=True)
