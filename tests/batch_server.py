"""A local (127.0.0.1) server for the OpenAI files and batches endpoints, as OpenAI documents
them: `POST /v1/files` (multipart, purpose "batch"), `GET /v1/files/{id}/content`,
`POST /v1/batches` (input_file_id, endpoint, completion_window "24h"), `GET /v1/batches/{id}`.

A batch is `validating` when created and `completed` at the first poll `process_s` seconds
later (never while its id is in `hold`; `cancelled` instead if its id is in `cancel`); its
lines are then answered into an output file (2xx) and an error file (the rest).
What goes wrong is controlled per request by words in its body: FLAKY gets a 500 for its first
`flaky_times` submissions, BAD always gets a 400. With `expire_after = k` a batch ends
`expired` after answering its first k lines; the rest get `batch_expired` errors.
"""
from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENDPOINTS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"}


def answer(url: str, body: dict) -> dict:
    """A chat or completions answer that echoes the last user message (or the prompt)."""
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    if url.endswith("/chat/completions"):
        user = body["messages"][-1]["content"]
        return {"object": "chat.completion", "model": body["model"], "usage": usage,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"echo: {user}"}}]}
    return {"object": "text_completion", "model": body["model"], "usage": usage,
            "choices": [{"index": 0, "finish_reason": "stop", "text": f" echo: {body['prompt']}"}]}


class BatchServer:
    def __init__(self):
        self.process_s = 0.0
        self.flaky_times = 1
        self.expire_after: int | None = None
        self.hold: set[str] = set()
        self.cancel: set[str] = set()
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.files: dict[str, dict] = {}  # id -> {"purpose", "content", "filename"}
        self.batches: dict[str, dict] = {}
        self.created_at: dict[str, float] = {}
        self.batch_lines: dict[str, list[dict]] = {}  # batch id -> its input lines
        self.seen: dict[str, int] = {}  # custom_id -> submissions so far
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _read(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _send(self, code: int, payload, content_type="application/json"):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                raw = self._read()
                with server.lock:
                    server.requests.append(("POST", self.path))
                    if self.path == "/v1/files":
                        return self._send(*server.upload(self.headers["Content-Type"], raw))
                    if self.path == "/v1/batches":
                        return self._send(*server.create(json.loads(raw)))
                    if self.path in ENDPOINTS:
                        return self._send(200, answer(self.path, json.loads(raw)))
                self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_GET(self):
                with server.lock:
                    server.requests.append(("GET", self.path))
                    parts = self.path.strip("/").split("/")
                    if parts[:2] == ["v1", "batches"] and len(parts) == 3:
                        return self._send(*server.retrieve(parts[2]))
                    if parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
                        f = server.files.get(parts[2])
                        if f is None:
                            return self._send(404, {"error": {"message": "no such file"}})
                        return self._send(200, f["content"], "application/octet-stream")
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def count(self, method: str, prefix: str) -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))

    # ---- endpoints (called under the lock) ---------------------------------------------
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
            cid, text = line["custom_id"], json.dumps(line["body"])
            rid = f"batch_req_{batch['id']}_{n}"
            if self.expire_after is not None and n >= self.expire_after:
                err.append({"id": rid, "custom_id": cid, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could "
                                      "not be executed before the completion window expired."}})
                continue
            self.seen[cid] = self.seen.get(cid, 0) + 1
            if "BAD" in text:
                code, body = 400, {"error": {"message": "invalid request",
                                             "type": "invalid_request_error"}}
            elif "FLAKY" in text and self.seen[cid] <= self.flaky_times:
                code, body = 500, {"error": {"message": "server error", "type": "server_error"}}
            else:
                code, body = 200, answer(line["url"], line["body"])
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
