"""Per-job logging for the workflow's jobs (`selfknow.runner`): stderr to the rule's log, timing, a summary line.

Inside `job_log`, everything a job writes to stderr lands in the rule's log: Python-level
writes (the `selfknow` logger, warnings, tqdm progress bars, which look up `sys.stderr` when a
bar is created) through `sys.stderr`, and C-level writes of libraries (torch, tokenizers) and
child processes through file descriptor 2, which is pointed at the log too. A progress bar
redraws itself with carriage returns; in a log file each redraw becomes its own line, so
`tail -f` and an editor both show the progress history.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
import threading
import time
from typing import IO, Iterator

log = logging.getLogger("selfknow")


class _LogStream:
    """A text stream onto the log file that turns tqdm's carriage-return redraws into lines."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write(self, s: str) -> int:
        if "\r" in s:
            s = "\n".join(part.rstrip(" ") for part in s.split("\r"))
        return self._stream.write(s)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _fd2_to(path: str) -> Iterator[None]:
    """Point file descriptor 2 at `path` (append) for the block; restore it afterwards."""
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (some embedded interpreters): nothing to redirect
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


class _Residency:
    """Process-wide count of base-model weight loads and of base models alive at once (the
    backends count them, `selfknow.models.registry.track_base`; the job log reports them)."""

    def __init__(self) -> None:
        self.resident = 0
        self.reset()

    def reset(self) -> None:
        """Start counting loads afresh; bases still alive count towards the new peak."""
        self.loads = 0
        self.peak = self.resident

    def _released(self) -> None:
        self.resident -= 1


RESIDENCY = _Residency()


def residency_summary() -> dict:
    """{"base_loads", "peak_resident_bases"} since the last `RESIDENCY.reset()`."""
    return {"base_loads": RESIDENCY.loads, "peak_resident_bases": RESIDENCY.peak}


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (Snakemake cancelling a job, SLURM's scancel) raises SystemExit, so that the
    job's `finally` blocks and context managers still run: scratch files are removed and no
    temporary output is left behind. Python's default is to die without unwinding."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# glibc's `mallopt` parameters (malloc.h) and the values a job runs with.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TRIM_THRESHOLD = 256 << 20
_MMAP_THRESHOLD = 64 << 20


def _keep_freed_memory() -> None:
    """Let glibc's malloc keep freed memory for the next allocation instead of returning it.

    A training step allocates and frees the same activation and gradient tensors again and
    again. With glibc's defaults, blocks over its mmap threshold (128 KiB, rising to at most
    32 MiB) are unmapped when freed, and the top of the heap is trimmed once 128 KiB of it are
    free, so every step faults fresh zeroed pages in. The default's largest LoRA job
    (`oracle_pooled`) took 5.8-7.5 million page faults and 14-16 s of system time so, against
    0.2 million and 2 s with these thresholds (the reuse PyTorch's CPU tuning guide gets from
    jemalloc or TCMalloc). glibc only; `MALLOC_*` variables or `glibc.malloc` tunables the
    user set win."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
    except (AttributeError, ValueError, OSError):  # not glibc (macOS, musl)
        return
    if any(k.startswith("MALLOC_") for k in os.environ) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return
    libc = ctypes.CDLL(None)
    libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


@contextlib.contextmanager
def job_log(log_path: str | None, job: str) -> Iterator[dict]:
    """Send stderr and the `selfknow` logger to `log_path`; on exit log one summary line
    ``<job> done in <s> s: k=v ...`` from the dict the block fills in (items, cache hits, ...),
    followed, when the job loaded model weights, by `base_loads` (copies of base-model weights
    loaded) and `peak_resident_bases` (most of them alive at once) counted by the backends."""
    summary: dict = {}
    RESIDENCY.reset()
    # At exit the interpreter collects every object the job leaves, about 460,000 once torch,
    # transformers and peft are imported: 1.2 s a job. Frozen, they are left to the operating
    # system (Python never promises `__del__` at exit). Registered once per process.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    _keep_freed_memory()
    if log_path:
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    stream = _LogStream(open(log_path, "a", encoding="utf-8", buffering=1)) if log_path else sys.stderr
    old_stderr = sys.stderr
    with contextlib.ExitStack() as stack:
        if log_path:
            sys.stderr.flush()
            stack.enter_context(_fd2_to(log_path))
        sys.stderr = stream
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        t0 = time.perf_counter()
        stack.enter_context(_sigterm_as_exit())
        try:
            yield summary
            if RESIDENCY.loads:
                summary.update(residency_summary())
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
