"""Running model-written Python in a child process that cannot hang the job, exhaust the
machine, reach the network or write outside its own scratch directory.

Layers, strongest first (`isolation()` reports which this machine has):

- *limits* (always): RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE, no core files, and a wall
  clock in the parent; the child runs in its own session, and every process of it is killed
  when it ends or times out.
- *own uid* (when the parent is root): the child drops to a fresh unprivileged uid of its own.
  That is what makes RLIMIT_NPROC bite (the kernel does not enforce it for root), makes every
  file the caller owns unwritable to it, and lets the parent kill every process the snippet
  left behind (`kill(-1)` as that uid), including ones that left the session. Without root,
  RLIMIT_NPROC is set to the caller's current process count plus the allowance, which is
  approximate, and only the session is killed.
- *network namespace* (when `unshare(CLONE_NEWNET)` works here, e.g. as root): the child gets
  an empty network namespace, so even loopback is down. Otherwise the guard below blocks every
  `socket.*` audit event instead.
- *guard* (always): a `sys.addaudithook` hook, installed before the snippet runs and not
  removable from Python (a second line of defence: the uid and the namespace are the boundary
  the kernel enforces), that refuses to open files for writing (or remove, rename, chmod,
  ...) outside the scratch directory, to start programs (`subprocess`, `os.system`, `exec*`,
  `posix_spawn`), to load native code through `ctypes` (which could bypass it) and to walk the
  interpreter's objects with `gc` (which could reach its state). A forked
  child inherits the hook, so `os.fork` alone stays allowed and is bounded by the process limit.

The scratch directory is deleted afterwards. Whatever the snippet does, it ends as a `Result`
whose status says how; only a machine that cannot start the interpreter raises (`SandboxError`).
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_CLONE_NEWNET = 0x40000000
# Fresh uids start above every range a distribution or an LDAP directory hands out; the
# caller's pid in the middle bits keeps concurrent sandboxes on one host apart.
_UID_BASE = 1 << 24
_run_counter = itertools.count()
_counter_lock = threading.Lock()


class SandboxError(RuntimeError):
    """The sandbox itself cannot run here (never raised for anything the snippet does)."""


@dataclass(frozen=True)
class Limits:
    """What one run may use. `max_processes` counts the snippet's own process (and threads,
    as RLIMIT_NPROC does): 1 allows no child process."""

    wall_s: float
    cpu_s: int
    memory_mb: int
    max_processes: int
    max_file_mb: int
    output_bytes: int

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "max_processes", "max_file_mb", "output_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"sandbox limit {name} must be a positive number, got {value!r}")
        if not isinstance(self.cpu_s, int):
            raise ValueError(f"sandbox limit cpu_s must be a whole number of seconds, got {self.cpu_s!r}")


@dataclass(frozen=True)
class Isolation:
    own_uid: bool
    netns: bool

    def describe(self) -> str:
        return "+".join(["limits", *(["own-uid"] if self.own_uid else []),
                         "netns" if self.netns else "socket-guard", "guard"])


@dataclass(frozen=True)
class Result:
    """`status`: passed (exit 0), failed (non-zero exit), timeout (wall clock), cpu_limit
    (SIGXCPU), memory_limit (MemoryError), file_limit (RLIMIT_FSIZE), killed (SIGKILL before the wall
    clock ran out: the hard CPU limit or the kernel's OOM killer) or crashed (another signal)."""

    status: str
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    isolation: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# Runs in the child before the snippet: argv = [scratch, block_network]. Kept free of imports
# beyond sys/os so that nothing it loads can be used to undo it.
_GUARD = r'''
import os, sys
def _install(scratch, block_network):
    root = os.path.realpath(scratch)
    def inside(p):
        if isinstance(p, int):
            return True
        p = os.path.realpath(os.fsdecode(p))
        return p == root or p.startswith(root + os.sep)
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    path_events = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                             "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree",
                             "shutil.copyfile", "shutil.move", "os.mkfifo", "os.mknod"})
    # gc's object walks are refused too: they are the way to reach this hook's state
    refused = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                         "os.startfile", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
                         "gc.get_objects", "gc.get_referrers", "gc.get_referents"})
    def pathlike(a):
        return isinstance(a, (str, bytes)) or hasattr(a, "__fspath__")
    def hook(event, args):
        if event in refused:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] in ("_posixsubprocess", "_ctypes"):
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        if block_network and event.startswith("socket."):
            raise PermissionError(f"sandbox: network access is not allowed ({event})")
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in mode for c in "wax+")) or bool((flags or 0) & writes)
            if writing and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the scratch directory")
        elif event in path_events:
            for a in args:
                if pathlike(a) and not inside(a):
                    raise PermissionError(f"sandbox: {event} on {a!r} outside the scratch directory")
    sys.addaudithook(hook)
_install(sys.argv[1], sys.argv[2] == "1")
del _install
sys.argv = ["program.py"]
with open("program.py", encoding="utf-8") as _f:
    _code = compile(_f.read(), "program.py", "exec")
del _f
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
'''


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare_network() -> None:
    if _libc().unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _fresh_uid() -> int:
    with _counter_lock:
        k = next(_run_counter) & 0xFF
    return _UID_BASE + ((os.getpid() << 8) | k)


def _starts(python: str, netns: bool, uid: int | None) -> bool:
    def setup() -> None:
        if netns:
            _unshare_network()
        if uid is not None:
            _drop_to(uid)

    try:
        return subprocess.run([python, "-s", "-B", "-c", "pass"], preexec_fn=setup, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=None)
def isolation(python: str) -> Isolation:
    """Which layers work for `python` on this machine (probed once per interpreter)."""
    if not _starts(python, netns=False, uid=None):
        raise SandboxError(f"sandbox: cannot start the interpreter {python}")
    own_uid = os.geteuid() == 0
    if own_uid and not _starts(python, netns=False, uid=_fresh_uid()):
        raise SandboxError(f"sandbox: {python} cannot be run by an unprivileged uid (its files must be world-"
                           "readable and executable, e.g. /usr/bin/python3, not one under /root)")
    return Isolation(own_uid=own_uid, netns=_starts(python, netns=True, uid=None))


def _own_task_count() -> int:
    """Processes and threads of the caller's real uid (what RLIMIT_NPROC counts)."""
    uid, n = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = dict(line.split(":", 1) for line in Path(entry.path, "status").read_text().splitlines()
                          if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                n += int(fields["Threads"])
    return n


def _child_setup(limits: Limits, netns: bool, uid: int | None, nproc: int):
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.max_file_mb * 1024 * 1024

    def setup() -> None:
        if netns:
            _unshare_network()
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if uid is not None:
            _drop_to(uid)

    return setup


def _kill_everything(pid: int, uid: int | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if uid is None:
        return
    # kill(-1) from a process running as the snippet's uid reaches exactly its processes,
    # including those that started a session of their own
    killer = os.fork()
    if killer == 0:
        try:
            _drop_to(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(killer, 0)


def _remove_tree(path: str) -> None:
    def make_writable_and_retry(func, p, _exc):
        os.chmod(os.path.dirname(p), stat.S_IRWXU)
        func(p)

    shutil.rmtree(path, onerror=make_writable_and_retry)


def _tail(path: Path, n: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - n))
        return f.read().decode("utf-8", errors="replace")


def _status(returncode: int, timed_out: bool, stderr: str) -> str:
    if timed_out:
        return "timeout"
    if returncode == 0:
        return "passed"
    if returncode < 0:
        return {signal.SIGXCPU: "cpu_limit", signal.SIGXFSZ: "file_limit", signal.SIGKILL: "killed"}.get(
            -returncode, "crashed")
    # Python ignores SIGXFSZ, so a write past RLIMIT_FSIZE raises EFBIG instead of killing it
    if "[Errno 27] File too large" in stderr:
        return "file_limit"
    return "memory_limit" if "MemoryError" in stderr else "failed"


def run_python(code: str, limits: Limits, python: str, scratch_root: str | None = None) -> Result:
    """Run `code` as a script with the interpreter `python` under `limits`, in a fresh scratch
    directory (under `scratch_root`, default the system temporary directory) deleted afterwards."""
    iso = isolation(python)
    uid = _fresh_uid() if iso.own_uid else None
    nproc = limits.max_processes if uid is not None else _own_task_count() + limits.max_processes
    scratch = tempfile.mkdtemp(prefix="selfknow-sandbox-", dir=scratch_root)
    capture = tempfile.mkdtemp(prefix="selfknow-sandbox-out-")
    try:
        Path(scratch, "program.py").write_text(code, encoding="utf-8")
        if uid is not None:
            for p in (scratch, os.path.join(scratch, "program.py")):
                os.chown(p, uid, uid)
        out, err = Path(capture, "stdout"), Path(capture, "stderr")
        env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0"}
        argv = [python, "-s", "-B", "-c", _GUARD, scratch, "0" if iso.netns else "1"]
        with open(out, "wb") as fo, open(err, "wb") as fe:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(argv, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                        preexec_fn=_child_setup(limits, iso.netns, uid, nproc),
                                        start_new_session=True)
            except (OSError, subprocess.SubprocessError) as e:
                raise SandboxError(f"sandbox: could not start {python}: {e}") from e
            try:
                proc.wait(timeout=limits.wall_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_everything(proc.pid, uid)
                returncode = proc.wait()
            wall = time.monotonic() - start
        stderr = _tail(err, limits.output_bytes)
        return Result(status=_status(returncode, timed_out, stderr), returncode=returncode,
                      stdout=_tail(out, limits.output_bytes), stderr=stderr, wall_s=wall, isolation=iso.describe())
    finally:
        _remove_tree(scratch)
        shutil.rmtree(capture)
