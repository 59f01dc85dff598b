"""OpenAI's files and batches endpoints, as OpenAI documents them, for a local stand-in server
(the rehearsal's `selfknow.rehearsal.server`, the tests' `tests/batch_server.py`):
`POST /v1/files` (multipart, purpose "batch"), `GET /v1/files/{id}/content`, `POST /v1/batches`
(input_file_id, endpoint, completion_window "24h"), `GET /v1/batches/{id}`.

A batch is `validating` when created and `completed` at the first poll `process_s` seconds
later (never while its id is in `hold`; `cancelled` instead if its id is in `cancel`); each of
its lines is then answered by `answer(url, body, custom_id)` -> (HTTP status, response body),
2xx lines into the output file, the rest into the error file. With `expire_after = k` a batch
ends `expired` after answering its first k lines; the rest get `batch_expired` errors. Callers
hold their own lock around these methods.
"""
from __future__ import annotations

import email.parser
import email.policy
import json
import time
from typing import Callable

ENDPOINTS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"}


class BatchStore:
    def __init__(self, answer: Callable[[str, dict, str], tuple[int, dict]]):
        self.answer = answer
        self.process_s = 0.0
        self.expire_after: int | None = None
        self.hold: set[str] = set()
        self.cancel: set[str] = set()
        self.files: dict[str, dict] = {}  # id -> {"purpose", "content", "filename"}
        self.batches: dict[str, dict] = {}
        self.created_at: dict[str, float] = {}
        self.batch_lines: dict[str, list[dict]] = {}  # batch id -> its input lines

    def route(self, method: str, path: str, content_type: str | None, raw: bytes) -> tuple[int, object] | None:
        """(HTTP status, JSON object or file bytes) of a files/batches request; None for
        another path."""
        parts = path.strip("/").split("/")
        if method == "POST" and path == "/v1/files":
            return self.upload(content_type or "", raw)
        if method == "POST" and path == "/v1/batches":
            return self.create(json.loads(raw))
        if method == "GET" and parts[:2] == ["v1", "batches"] and len(parts) == 3:
            return self.retrieve(parts[2])
        if method == "GET" and parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
            f = self.files.get(parts[2])
            return (404, {"error": {"message": "no such file"}}) if f is None else (200, f["content"])
        return None

    def _new_file(self, content: bytes, purpose: str, filename: str) -> dict:
        fid = f"file-{len(self.files) + 1}"
        self.files[fid] = {"content": content, "purpose": purpose, "filename": filename}
        return {"id": fid, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                "filename": filename, "purpose": purpose}

    def upload(self, content_type: str, raw: bytes):
        msg = email.parser.BytesParser(policy=email.policy.default).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
        fields = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fields[name] = (part.get_filename(), part.get_payload(decode=True))
        if fields.get("purpose", (None, b""))[1] != b"batch" or "file" not in fields:
            return 400, {"error": {"message": "need purpose=batch and a file"}}
        filename, content = fields["file"]
        return 200, self._new_file(content, "batch", filename)

    def create(self, req: dict):
        f = self.files.get(req.get("input_file_id"))
        if f is None or f["purpose"] != "batch":
            return 400, {"error": {"message": "input_file_id must name a file with purpose batch"}}
        if req.get("endpoint") not in ENDPOINTS:
            return 400, {"error": {"message": f"unsupported endpoint {req.get('endpoint')!r}"}}
        if req.get("completion_window") != "24h":
            return 400, {"error": {"message": "completion_window must be '24h'"}}
        bid = f"batch_{len(self.batches) + 1}"
        lines, errors, ids = [], [], set()
        for n, text in enumerate(f["content"].decode().splitlines(), 1):
            line = json.loads(text)
            if line.get("method") != "POST" or line.get("url") != req["endpoint"] \
                    or line.get("custom_id") in ids:
                errors.append({"code": "invalid_request", "line": n,
                               "message": "bad method, url or duplicate custom_id"})
            ids.add(line.get("custom_id"))
            lines.append(line)
        now = int(time.time())
        self.batches[bid] = {
            "id": bid, "object": "batch", "endpoint": req["endpoint"], "errors": None,
            "input_file_id": req["input_file_id"], "completion_window": "24h",
            "status": "validating", "output_file_id": None, "error_file_id": None,
            "created_at": now, "in_progress_at": None, "expires_at": now + 86400,
            "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
            "cancelling_at": None, "cancelled_at": None, "metadata": req.get("metadata"),
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
        if errors:
            self.batches[bid].update(status="failed", failed_at=now,
                                     errors={"object": "list", "data": errors})
        self.created_at[bid] = time.monotonic()
        self.batch_lines[bid] = lines
        return 200, self.batches[bid]

    def retrieve(self, bid: str):
        batch = self.batches.get(bid)
        if batch is None:
            return 404, {"error": {"message": f"no batch {bid}"}}
        if bid in self.cancel and batch["status"] != "cancelled":
            batch.update(status="cancelled", cancelled_at=int(time.time()))
        if batch["status"] in ("validating", "in_progress"):
            if bid not in self.hold and time.monotonic() - self.created_at[bid] >= self.process_s:
                self._finish(batch)
            else:
                batch["status"] = "in_progress"
        return 200, batch

    def _finish(self, batch: dict) -> None:
        out, err = [], []
        for n, line in enumerate(self.batch_lines[batch["id"]]):
            cid = line["custom_id"]
            rid = f"batch_req_{batch['id']}_{n}"
            if self.expire_after is not None and n >= self.expire_after:
                err.append({"id": rid, "custom_id": cid, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could "
                                      "not be executed before the completion window expired."}})
                continue
            code, body = self.answer(line["url"], line["body"], cid)
            row = {"id": rid, "custom_id": cid, "error": None,
                   "response": {"status_code": code, "request_id": f"req_{n}", "body": body}}
            (out if code == 200 else err).append(row)
        now = int(time.time())
        for rows, key in ((out, "output_file_id"), (err, "error_file_id")):
            if rows:
                content = "".join(json.dumps(r) + "\n" for r in rows).encode()
                name = f"{batch['id']}_{key}.jsonl"
                batch[key] = self._new_file(content, "batch_output", name)["id"]
        n_lines = len(self.batch_lines[batch["id"]])
        expired = self.expire_after is not None and n_lines > self.expire_after
        batch.update(status="expired" if expired else "completed",
                     **{"expired_at" if expired else "completed_at": now},
                     request_counts={"total": len(out) + len(err), "completed": len(out),
                                     "failed": len(err)})
