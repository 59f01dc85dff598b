"""A local (127.0.0.1) server for the OpenAI files and batches endpoints
(`selfknow.rehearsal.batches.BatchStore`: OpenAI's documented behaviour, `process_s`, `hold`,
`cancel`, `expire_after`), answering every line with an echo.

What goes wrong is controlled per request by words in its body: FLAKY gets a 500 for its first
`flaky_times` submissions, BAD always gets a 400.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selfknow.rehearsal.batches import ENDPOINTS, BatchStore


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


class BatchServer(BatchStore):
    def __init__(self):
        super().__init__(self._line)
        self.flaky_times = 1
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.seen: dict[str, int] = {}  # custom_id -> submissions so far
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, payload):
                binary = isinstance(payload, bytes)
                data = payload if binary else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/octet-stream" if binary else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.requests.append((method, self.path))
                    routed = server.route(method, self.path, self.headers.get("Content-Type"), raw)
                    if routed is None and method == "POST" and self.path in ENDPOINTS:
                        routed = 200, answer(self.path, json.loads(raw))
                self._send(*(routed or (404, {"error": {"message": f"no route {self.path}"}})))

            def do_POST(self):
                self._handle("POST")

            def do_GET(self):
                self._handle("GET")

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

    def _line(self, url: str, body: dict, cid: str) -> tuple[int, dict]:
        text = json.dumps(body)
        self.seen[cid] = self.seen.get(cid, 0) + 1
        if "BAD" in text:
            return 400, {"error": {"message": "invalid request", "type": "invalid_request_error"}}
        if "FLAKY" in text and self.seen[cid] <= self.flaky_times:
            return 500, {"error": {"message": "server error", "type": "server_error"}}
        return 200, answer(url, body)


def kill_once_waiting(cmd: list[str], recorded, *, env=None, timeout_s: float = 120) -> None:
    """Run `cmd` (a batch client) and kill it once `recorded()` is true (its batch is recorded
    and being polled): a client killed mid-flight. Fails if it exits first or never gets there."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not recorded():
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the client never recorded its batch"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
