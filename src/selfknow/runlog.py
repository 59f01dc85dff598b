"""Per-job logging for the workflow's scripts: stderr to the rule's log, timing, a summary line."""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Iterator

log = logging.getLogger("selfknow")


@contextlib.contextmanager
def job_log(log_path: str | None, job: str) -> Iterator[dict]:
    """Send stderr and the `selfknow` logger to `log_path`; on exit log one summary line
    ``<job> done in <s> s: k=v ...`` from the dict the block fills in."""
    summary: dict = {}
    stream = open(log_path, "a", encoding="utf-8", buffering=1) if log_path else sys.stderr
    old_stderr = sys.stderr
    sys.stderr = stream
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    t0 = time.perf_counter()
    try:
        yield summary
        parts = " ".join(f"{k}={v}" for k, v in summary.items())
        log.info("%s done in %.1f s: %s", job, time.perf_counter() - t0, parts)
    except BaseException:
        log.exception("%s failed after %.1f s", job, time.perf_counter() - t0)
        raise
    finally:
        root.removeHandler(handler)
        sys.stderr = old_stderr
        if stream is not old_stderr:
            stream.close()
