"""The code sandbox against hostile snippets, run by the current user and (when the tests run as
root, as CI does) by an unprivileged user: each must end as a scored failure within its limits,
and afterwards the machine must hold no file the snippet wrote outside its scratch directory,
no process it started, and its output no secret of its parent."""
from __future__ import annotations

import base64
import getpass
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from selfknow.config import load_config
from selfknow.stages.tasks import sandbox
from selfknow.stages.tasks.sandbox import Isolation, Limits, SandboxError, run_python
from selfknow.stages.tasks.sandbox_child import HARNESS

from conftest import REPO
from task_fixtures import LIMITS, sandbox_python

#: an unprivileged uid with no account (setpriv needs none)
OTHER_UID = 4242
WHO = ["me", "unprivileged"]
# the sandbox as another user: one run, its Result as JSON on stdout
_DRIVER = r"""
import json, sys
from dataclasses import asdict
sys.path.insert(0, sys.argv[1])
from selfknow.stages.tasks.sandbox import Limits, run_python
r = run_python(sys.stdin.read(), Limits(**json.loads(sys.argv[2])), sys.argv[3], allow_unisolated=False)
print(json.dumps(asdict(r)))
"""


@pytest.fixture(scope="module")
def python() -> str:
    return sandbox_python()


@pytest.fixture()
def secret(monkeypatch) -> str:
    """A secret in the environment of whoever calls the sandbox."""
    value = "sk-" + secrets.token_hex(12)
    monkeypatch.setenv("SELFKNOW_TEST_SECRET", value)
    return value


def _as_user(argv: list[str], env: dict[str, str], groups: tuple[int, ...] = ()) -> list[str]:
    """`argv` as OTHER_UID, with no supplementary group but `groups`."""
    group_opt = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    return ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", group_opt, "env", "-i",
            *(f"{k}={v}" for k, v in env.items()), *argv]


def _run(who: str, code: str, python: str, secret: str, limits: Limits = LIMITS,
         home: str = "/nonexistent", groups: tuple[int, ...] = ()) -> sandbox.Result:
    if who == "me":
        return run_python(code, limits, python, allow_unisolated=False)
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "SELFKNOW_TEST_SECRET": secret}
    argv = _as_user(["/usr/bin/python3", "-I", "-c", _DRIVER, str(REPO / "src"), json.dumps(asdict(limits)), python],
                    env, groups)
    done = subprocess.run(argv, input=code, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = sandbox.Result(**json.loads(done.stdout))
    assert result.isolation == "limits+namespaces"  # no root, no fallback
    return result


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state not in ("Z", "X"):  # a container's init may not reap orphans
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def _files_named(marker: str, *dirs: Path) -> list[Path]:
    return [p for d in dirs if d.is_dir() for p in d.iterdir() if marker in p.name]


@pytest.fixture()
def arena(tmp_path):
    """A world-writable directory with a precious file, as a careless user's would be."""
    tmp_path.chmod(0o777)
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    victim.chmod(0o666)
    return tmp_path


MARK = "skmark" + secrets.token_hex(3)
#: in the command line of every process a snippet starts (sleep takes "97.<digits>")
PMARK = f"{secrets.randbelow(10**6):06d}"
#: room for a few children, so that the process limit is not what stops the orphans
HOSTILE_LIMITS = Limits(wall_s=10.0, cpu_s=1, memory_mb=256, max_processes=6, max_file_mb=4, output_bytes=4000,
                        max_inodes=256, max_fds=64)

HOSTILE = {
    "infinite loop": "while True:\n    pass\n",
    "fork bomb": f"import subprocess\nps = []\nwhile True:\n    ps.append(subprocess.Popen(['sleep', '97.{PMARK}']))\n",
    "memory": "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))\n",
    "disk": "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 10**6)\n",
    "orphans": (f"import os, subprocess, time\nsubprocess.Popen(['sleep', '98.{PMARK}'], start_new_session=True)\n"
                f"subprocess.Popen(['sh', '-c', 'sleep 99.{PMARK} & exit'])\ntime.sleep(0.5)\n"),
    "huge output": "while True:\n    print('y' * 10**6)\n",
}
# (snippet writing, deleting or renaming outside the scratch directory: ARENA is the arena)
WRITES = {
    "open in the arena": "open(ARENA + '/MARK-a', 'w').write('x')",
    "dir_fd write": "fd = os.open(ARENA, os.O_RDONLY)\nos.close(os.open('MARK-b', os.O_WRONLY | os.O_CREAT, dir_fd=fd))",
    "dir_fd unlink": "fd = os.open(ARENA, os.O_RDONLY)\nos.unlink('keep.txt', dir_fd=fd)",
    "dir_fd rename": "fd = os.open(ARENA, os.O_RDONLY)\nos.rename('keep.txt', 'MARK-c', src_dir_fd=fd, dst_dir_fd=fd)",
    "truncate": "os.truncate(ARENA + '/keep.txt', 0)",
    "/tmp": "open('/tmp/MARK-d', 'w').write('x')",
    "/dev/shm": "open('/dev/shm/MARK-e', 'wb').write(b'x' * 10**6)",
    "/dev/shm dir_fd": "fd = os.open('/dev/shm', os.O_RDONLY)\nos.close(os.open('MARK-f', os.O_WRONLY | os.O_CREAT, dir_fd=fd))",
    "/var/tmp": "open('/var/tmp/MARK-g', 'w').write('x')",
}


def _assert_machine_clean(arena: Path) -> None:
    assert _processes_with(PMARK) == []
    assert _files_named(MARK, arena, Path("/tmp"), Path("/dev/shm"), Path("/var/tmp")) == []
    assert (arena / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_snippet_fails_and_leaves_nothing_behind(python, secret, arena, who, case):
    r = _run(who, HOSTILE[case], python, secret, HOSTILE_LIMITS)
    # the orphans' parent runs to its end (a pass), leaving its children to be killed
    expected = {"infinite loop": ("cpu_limit", "killed", "timeout"), "fork bomb": ("failed",),
                "memory": ("memory_limit",), "disk": ("file_limit",), "orphans": ("passed",),
                "huge output": ("file_limit",)}[case]
    assert r.status in expected, (r.status, r.stderr)
    assert len(r.stdout) <= LIMITS.output_bytes and len(r.stderr) <= LIMITS.output_bytes
    _assert_machine_clean(arena)


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("case", list(WRITES))
def test_no_write_outside_the_scratch_directory(python, secret, arena, who, case):
    code = "import os\nARENA = " + repr(str(arena)) + "\n" + WRITES[case].replace("MARK", MARK)
    r = _run(who, code, python, secret)
    assert r.status == "failed" and ("Read-only file system" in r.stderr or "Permission" in r.stderr
                                     or "No such file" in r.stderr), r.stderr
    _assert_machine_clean(arena)


@pytest.mark.parametrize("allow_unisolated", [False, True])
def test_the_scratch_directory_is_writable_and_gone_afterwards(python, allow_unisolated):
    r = run_python("import os\nopen('note.txt', 'w').write('x')\nprint(os.getcwd(), open('note.txt').read())",
                   LIMITS, python, allow_unisolated=allow_unisolated)
    assert r.passed and r.stdout.split()[1] == "x", r.stderr
    assert not Path(r.stdout.split()[0]).parent.exists()


STEAL_ENV = """
import os
print(dict(os.environ))
for pid in ['self', '1', str(os.getppid())] + [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        print(open(f'/proc/{pid}/environ', 'rb').read())
    except OSError as e:
        print('no', pid, e)
"""


@pytest.mark.parametrize("who", WHO)
def test_the_parents_environment_cannot_be_read(python, secret, who):
    r = _run(who, STEAL_ENV, python, secret)
    assert r.passed, r.stderr
    assert secret not in r.stdout + r.stderr and "SELFKNOW_TEST_SECRET" not in r.stdout + r.stderr


def test_the_callers_home_is_hidden(python, secret):
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    home = Path(tempfile.mkdtemp(prefix="selfknow-test-home-"))  # where the user can reach it
    try:
        (home / ".netrc").write_text(secret)
        for p in (home, home / ".netrc"):
            os.chown(p, OTHER_UID, OTHER_UID)
        code = f"import os\nprint(os.path.exists({str(home)!r}))\nprint(open({str(home / '.netrc')!r}).read())"
        r = _run("unprivileged", code, python, secret, home=str(home))
        assert r.status == "failed" and "No such file" in r.stderr and secret not in r.stdout + r.stderr, r.stderr
        assert r.stdout.strip() == "False"  # not in the sandbox's filesystem at all
    finally:
        shutil.rmtree(home)


@pytest.fixture()
def victim(request):
    """A process of the sandbox's caller (its uid), outside the sandbox, to be signalled."""
    who = request.getfixturevalue("who")
    argv = ["sleep", "60"]
    if who != "me":
        if os.geteuid() != 0:
            pytest.skip("switching to an unprivileged user needs root")
        argv = _as_user(argv, {"PATH": "/usr/bin:/bin"})
    proc = subprocess.Popen(argv, start_new_session=True)
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("who", WHO)
def test_no_signal_reaches_a_process_outside(python, secret, who, victim):
    pid = victim.pid
    code = (f"import os, signal\nfor target in ({pid}, -{pid}, os.getppid(), -1):\n    for sig in (signal.SIGSTOP, "
            "signal.SIGKILL):\n        try:\n            os.kill(target, sig)\n        except OSError as e:\n"
            "            print(target, e)\n")
    r = _run(who, code, python, secret)
    assert r.status in ("passed", "failed"), r.stderr  # the snippet's own end, not a limit
    time.sleep(0.2)
    assert victim.poll() is None
    assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T"


@pytest.fixture()
def listener():
    """A TCP server on loopback that records whether anyone connected."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    connected = threading.Event()
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connected.set()
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield server.getsockname()[1], connected
    stop.set()
    t.join()
    server.close()


@pytest.mark.parametrize("who", WHO)
def test_the_network_is_unreachable(python, secret, who, listener):
    port, connected = listener
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # reachable from outside
    assert connected.wait(2)
    connected.clear()
    r = _run(who, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)", python, secret)
    assert r.status == "failed" and "Network is unreachable" in r.stderr, r.stderr
    time.sleep(0.3)
    assert not connected.is_set()


def test_root_runs_the_snippet_as_a_fresh_unprivileged_uid(python):
    if os.geteuid() != 0:
        pytest.skip("only root can drop to another uid")
    r = run_python("import os\nprint(os.getuid(), os.getgroups())", LIMITS, python, allow_unisolated=False)
    # root of its own user namespace, which maps to the fresh uid outside
    assert r.passed and r.stdout.split(maxsplit=1) == ["0", "[]\n"] and "own-uid" in r.isolation, r.stderr


def test_a_sleeping_snippet_ends_at_the_wall_clock(python):
    limits = Limits(wall_s=1.5, cpu_s=1, memory_mb=256, max_processes=2, max_file_mb=4, output_bytes=4000,
                    max_inodes=256, max_fds=64)
    r = run_python("import time\ntime.sleep(60)", limits, python, allow_unisolated=False)
    assert r.status == "timeout" and not r.passed


def test_an_early_exit_is_never_a_pass(python):
    assert run_python("print(1)", LIMITS, python, allow_unisolated=False).passed
    for code in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit()"):
        r = run_python(code, LIMITS, python, allow_unisolated=False)
        assert r.status == "failed" and r.returncode == 0


def test_without_namespaces_generated_code_is_refused_unless_allowed(monkeypatch):
    python = "/usr/bin/python3"  # world-readable, for the fresh uid root drops to
    monkeypatch.setattr(sandbox, "isolation", lambda _python: Isolation(False, os.geteuid() == 0, "no user namespaces"))
    with pytest.raises(SandboxError, match=r"no user namespaces.*ladder\.extension\.sandbox\.allow_unisolated"):
        run_python("print(1)", LIMITS, python, allow_unisolated=False)
    r = run_python("print(sum(range(10)))", LIMITS, python, allow_unisolated=True)
    assert r.passed and r.stdout.strip() == "45" and "namespaces" not in r.isolation
    assert not run_python("import os\nos._exit(0)", LIMITS, python, allow_unisolated=True).passed
    # the audit hook's extension allowlist holds there too
    r = run_python(SUBINTERPRETER_FORGERY + WRONG, LIMITS, python, allow_unisolated=True)
    assert r.status == "failed" and "extension module x._xxsubinterpreters is not allowed" in r.stderr, r.stderr


def test_output_is_cut_to_its_tail(python):
    r = run_python("print('a' * 10000 + 'END')", LIMITS, python, allow_unisolated=False)
    assert r.passed and len(r.stdout) == LIMITS.output_bytes and r.stdout.endswith("END\n")


def test_limits_are_checked():
    with pytest.raises(ValueError, match="sandbox limit memory_mb must be a positive number"):
        Limits(wall_s=1, cpu_s=1, memory_mb=0, max_processes=1, max_file_mb=1, output_bytes=10,
               max_inodes=256, max_fds=64)
    with pytest.raises(ValueError, match="cpu_s must be a whole number"):
        Limits(wall_s=1, cpu_s=1.5, memory_mb=10, max_processes=1, max_file_mb=1, output_bytes=10,
               max_inodes=256, max_fds=64)


def test_an_interpreter_that_cannot_start_is_a_sandbox_error(tmp_path):
    with pytest.raises(SandboxError, match="cannot start the interpreter"):
        sandbox.isolation(str(tmp_path / "no-python"))


# ----------------------------------------------------------------------------- the host's filesystem
@pytest.mark.parametrize("who", WHO)
def test_the_snippet_sees_only_what_the_interpreter_needs(python, secret, who):
    _, needed, _ = sandbox._interpreter(python)
    tmp = tempfile.gettempdir()  # the job directory's, whose path the working directory keeps
    tops = {p for p in ("bin", "lib", "lib64", "sbin", "lib32", "libx32") if os.path.lexists("/" + p)}
    expected = tops | {"usr", "etc", "dev", "proc"} | {p.split(os.sep)[1] for p in (*needed, tmp)}
    hidden = ["/run", "/var/run", "/var", "/home", "/root", "/sys", "/etc/passwd", "/dev/shm", str(REPO),
              str(Path(tmp, f"pytest-of-{getpass.getuser()}"))]
    code = ("import json, os\nprint(json.dumps([sorted(os.listdir(p)) for p in ('/', '/etc', '/dev', '/proc', "
            f"{tmp!r})]))\nprint(json.dumps([p for p in {hidden!r} if os.path.lexists(p)]))\nprint(os.getcwd())")
    r = _run(who, code, python, secret)
    assert r.passed, r.stderr
    listed, visible, cwd = r.stdout.splitlines()
    assert json.loads(visible) == [], r.stdout
    listed = json.loads(listed)
    assert set(listed[0]) == expected, listed[0]
    assert listed[1:4] == [["ld.so.cache"], ["full", "null", "random", "urandom", "zero"], []]
    # the system's temporary directory holds the job directory alone, read-only but for the scratch directory
    assert len(listed[4]) == 1 and cwd == os.path.join(tmp, listed[4][0], "scratch")


@pytest.mark.parametrize("who", WHO)
def test_the_snippet_sees_the_standard_library_only(python, secret, who):
    sites = _site_dirs(python)
    assert any(Path(d).is_dir() and any(Path(d).iterdir()) for d in sites), sites  # something to hide
    code = (f"import json, os, sys\nprint(json.dumps(sys.path))\n"
            f"print(json.dumps({{d: os.listdir(d) for d in {list(sites)!r} if os.path.isdir(d)}}))")
    r = _run(who, code, python, secret)
    assert r.passed, r.stderr
    path, listed = map(json.loads, r.stdout.splitlines())
    assert not [p for p in path if "-packages" in p] and path[-1].endswith("lib-dynload"), path
    assert listed and all(v == [] for v in listed.values()), listed


#: extension modules of the standard library left off the allowlist, by the name each is
#: refused under; the last imported under another name (its init resolves by the last component)
UNLISTED = {"mmap": "import mmap", "_ctypes": "import _ctypes", "_lsprof": "import cProfile",
            "_testcapi": "import _testcapi",
            "x.mmap": ("import importlib.util\nfrom importlib.machinery import PathFinder\n"
                        "spec = importlib.util.spec_from_file_location('x.mmap', PathFinder.find_spec('mmap').origin)\n"
                        "importlib.util.module_from_spec(spec)")}


@pytest.mark.parametrize("who", WHO)
def test_extension_modules_load_by_allowlist_whatever_their_name(python, secret, who):
    code = "\n".join([f"try:\n    exec({c!r})\n    print({k!r}, 'loaded')\nexcept ImportError as e:\n"
                      f"    print(e)" for k, c in UNLISTED.items()]
                     # uuid falls back to pure Python without _uuid
                     + ["import hashlib, json, math, subprocess, uuid",
                        "print(hashlib.md5(b'').hexdigest(), math.comb(5, 2))"])
    r = _run(who, code, python, secret)
    assert r.passed, r.stderr
    assert r.stdout.splitlines() == [f"sandbox: extension module {m} is not allowed" for m in UNLISTED] + [
        "d41d8cd98f00b204e9800998ecf8427e 10"], r.stdout


def _fake_interpreter(tmp_path: Path, exe: str, prefix: str) -> str:
    """A stand-in that answers the sandbox's question as an interpreter at `exe` in `prefix` would."""
    fake = tmp_path / exe.replace("/", "-")  # one path per answer: the sandbox asks each interpreter once
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' {exe} {prefix} {prefix} '[\"{prefix}/lib/site-packages\"]'\n")
    fake.chmod(0o755)
    return str(fake)


def test_the_interpreter_runs_from_its_base_with_its_prefix_bound(tmp_path):
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    # the base interpreter's site directories, which the sandbox hides, not the venv's
    base_sites = subprocess.run(["/usr/bin/python3", "-I", "-c", "import site; print(*site.getsitepackages())"],
                                capture_output=True, text=True, check=True).stdout.split()
    exe, needed, sites = sandbox._interpreter(str(tmp_path / "venv" / "bin" / "python"))
    assert (exe, needed) == (os.path.realpath("/usr/bin/python3"), ())
    assert set(base_sites) <= set(sites) and not any(p.startswith(str(tmp_path)) for p in sites), sites
    outside = _fake_interpreter(tmp_path, "/opt/py/bin/python3.12", "/opt/py")
    assert sandbox._interpreter(outside) == ("/opt/py/bin/python3.12", ("/opt/py",), ("/opt/py/lib/site-packages",))
    with pytest.raises(SandboxError, match="lives in / itself"):
        sandbox._interpreter(_fake_interpreter(tmp_path, "/python3", "/"))


@pytest.fixture()
def unix_listener(request):
    """A unix socket in a directory anyone can enter, that records whether anyone connected:
    0666 and the caller's for "me", the unprivileged user's own and 0600 for "unprivileged"."""
    who = request.getfixturevalue("who")
    if who != "me" and os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    where = Path(tempfile.mkdtemp(prefix="selfknow-test-sock-"))
    where.chmod(0o755)
    path = where / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    if who == "me":
        path.chmod(0o666)
    else:
        os.chown(path, OTHER_UID, OTHER_UID)
        path.chmod(0o600)
    yield from _serving(server, path)
    shutil.rmtree(where)


def _serving(server: socket.socket, address):
    """Accepts on `server` until closed; yields (`address`, the event set on each connection)."""
    server.listen(1)
    server.settimeout(0.2)
    connected, stop = threading.Event(), threading.Event()

    def serve():
        while not stop.is_set():
            try:
                server.accept()[0].close()
                connected.set()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield address, connected
    finally:
        stop.set()
        t.join()
        server.close()


@pytest.mark.parametrize("who", WHO)
def test_an_abstract_unix_socket_of_the_host_is_unreachable(python, secret, who):
    if who != "me" and os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    name = "\0selfknow-test-" + secrets.token_hex(4)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    for _, connected in _serving(server, name):
        client = socket.socket(socket.AF_UNIX)
        client.connect(name)  # reachable from outside
        client.close()
        assert connected.wait(2)
        connected.clear()
        r = _run(who, f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({name!r})\nprint('connected')",
                 python, secret)
        assert r.status == "failed" and "Connection refused" in r.stderr, r.stderr
        time.sleep(0.3)
        assert not connected.is_set()


CONNECT = "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\nprint('connected')\n"


@pytest.mark.parametrize("who", WHO)
def test_a_host_unix_socket_is_unreachable(python, secret, who, unix_listener):
    path, connected = unix_listener
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(path))  # reachable from outside
    client.close()
    assert connected.wait(2)
    connected.clear()
    r = _run(who, CONNECT.format(path=str(path)), python, secret)
    assert r.status == "failed" and "No such file" in r.stderr and "connected" not in r.stdout, r.stderr
    time.sleep(0.3)
    assert not connected.is_set()


@pytest.mark.parametrize("who", WHO)
def test_the_callers_own_file_outside_home_is_unreachable(python, secret, who):
    if who != "me" and os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    where = Path(tempfile.mkdtemp(prefix="selfknow-test-file-"))
    try:
        where.chmod(0o755)
        note = where / "notes.txt"
        note.write_text(secret)
        note.chmod(0o600)
        if who != "me":
            os.chown(note, OTHER_UID, OTHER_UID)
        r = _run(who, f"print(open({str(note)!r}).read())", python, secret)
        assert r.status == "failed" and "No such file" in r.stderr and secret not in r.stdout + r.stderr, r.stderr
    finally:
        shutil.rmtree(where)


#: a group of the unprivileged user's, with no account (setpriv needs none)
OTHER_GID = 4343


@pytest.fixture()
def group_listener():
    """A file and a unix socket of root's that only members of OTHER_GID may open."""
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    where = Path(tempfile.mkdtemp(prefix="selfknow-test-group-"))
    where.chmod(0o755)
    secret_file = where / "group.txt"
    secret_file.write_text("group secret")
    os.chown(secret_file, 0, OTHER_GID)
    secret_file.chmod(0o640)
    path = where / "group.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chown(path, 0, OTHER_GID)
    path.chmod(0o660)
    for path_and_connected in _serving(server, path):
        yield secret_file, *path_and_connected
    shutil.rmtree(where)


def test_supplementary_groups_open_nothing(python, secret, group_listener):
    secret_file, path, connected = group_listener
    # outside the sandbox the group opens both
    read = CONNECT.format(path=str(path)) + f"print(open({str(secret_file)!r}).read())"
    done = subprocess.run(_as_user(["/usr/bin/python3", "-I", "-c", read], {"PATH": "/usr/bin:/bin"}, (OTHER_GID,)),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:2] == ["connected", "group secret"], done.stderr
    assert connected.wait(2)
    connected.clear()
    for code in (CONNECT.format(path=str(path)), f"print(open({str(secret_file)!r}).read())"):
        r = _run("unprivileged", code, python, secret, groups=(OTHER_GID,))
        assert r.status == "failed" and "No such file" in r.stderr and "group secret" not in r.stdout, r.stderr
    time.sleep(0.3)
    assert not connected.is_set()


# ----------------------------------------------------------------------------- inode and fd floods
FLOODS = {
    "inodes": "n = 0\ntry:\n    while True:\n        open(f'f{n}', 'w').close()\n        n += 1\nfinally:\n    print(n)\n",
    "fds": ("import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
            "finally:\n    print(len(fds))\n"),
}


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("flood", list(FLOODS))
def test_an_inode_or_fd_flood_stops_at_its_limit(python, secret, who, flood):
    r = _run(who, FLOODS[flood], python, secret)
    expected, error, cap = {"inodes": ("file_limit", "No space left on device", LIMITS.max_inodes),
                            "fds": ("failed", "Too many open files", LIMITS.max_fds)}[flood]
    assert r.status == expected and error in r.stderr, r.stderr
    assert 0 < int(r.stdout) <= cap


@pytest.mark.parametrize("who", WHO)
def test_one_process_may_start_no_child_and_no_thread(python, secret, who):
    limits = Limits(wall_s=5.0, cpu_s=1, memory_mb=256, max_processes=1, max_file_mb=4, output_bytes=4000,
                    max_inodes=256, max_fds=64)
    for code in ("import subprocess\nsubprocess.run(['true'])", "import threading\nthreading.Thread(target=print).start()"):
        r = _run(who, code, python, secret, limits)
        assert r.status == "failed" and ("Resource temporarily unavailable" in r.stderr
                                         or "can't start new thread" in r.stderr), r.stderr
    for config in ("config.yaml", "config/paper.yaml"):
        assert load_config(REPO / config)["ladder"]["extension"]["sandbox"]["max_processes"] == 1


@pytest.mark.parametrize("who", WHO)
def test_the_process_limit_ignores_the_callers_other_processes(python, secret, who):
    """Processes of the caller's uid that start while the sandbox starts (another job, another
    test suite) neither count against the snippet's limit nor make its start fail."""
    if who != "me" and os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    sleeper = ["sleep", "30"] if who == "me" else _as_user(["sleep", "30"], {"PATH": "/usr/bin:/bin"})
    others: list[subprocess.Popen] = []
    done = threading.Event()

    def crowd():
        while not done.is_set() and len(others) < 200:
            others.append(subprocess.Popen(sleeper))
            time.sleep(0.01)

    t = threading.Thread(target=crowd, daemon=True)
    t.start()
    try:
        r = _run(who, "print(sum(range(10)))", python, secret)
    finally:
        done.set()
        t.join()
        for proc in others:
            proc.kill()
            proc.wait()
    assert len(others) > 1
    assert r.passed and r.stdout.strip() == "45", r.stderr


# ----------------------------------------------------------------------------- forging a pass
# (a) a fresh copy of the `_signal` module, whose signal() the audit hook does not see: a
# handler's frame chain reaches the harness's locals
FORGE_BY_SIGNAL = """
import importlib.util, os
from importlib.machinery import BuiltinImporter
spec = BuiltinImporter.find_spec('_signal')
fresh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fresh)
def handler(signum, frame):
    while frame is not None:
        if 'token' in frame.f_locals and 'proof_fd' in frame.f_locals:
            os.write(frame.f_locals['proof_fd'], frame.f_locals['token'])
        frame = frame.f_back
fresh.signal(fresh.SIGUSR1, handler)
os.kill(os.getpid(), fresh.SIGUSR1)
"""
# Scanning a process's memory for the token: `read(address, n)` gives the bytes there (fewer
# where unmapped); the scan looks around objects at addresses `near` for the 32-byte bytes
# object of hex digits (its type, at `bytes_type`, and size, then the digits and their NUL) and
# writes it to `fd`
SCAN = r"""
def scan(read, bytes_type, near, fd):
    import os, re, struct
    head = struct.pack("<QQ", bytes_type, 32)
    for start in sorted({(a >> 16 << 16) + k * (1 << 16) for a in near for k in range(-256, 256)}):
        raw = read(start, (1 << 16) + 128)
        for m in re.finditer(re.escape(head), raw):
            body = raw[m.start() + 24:m.start() + 57]
            if re.fullmatch(rb"[0-9a-f]{32}\0", body):
                os.write(fd, body[:32])
                return True
    return False
"""
# (b) a child interpreter (no audit hook) reads the harness's memory with process_vm_readv
READER = SCAN + r"""
import ctypes, os, sys
pid, fd, bytes_type, *near = map(int, sys.argv[1:])
libc = ctypes.CDLL(None, use_errno=True)
class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                                  ctypes.c_ulong]
libc.process_vm_readv.restype = ctypes.c_ssize_t
errors = set()
def read(start, size):
    buf = ctypes.create_string_buffer(size)
    local, remote = IOVec(ctypes.addressof(buf), size), IOVec(start, size)
    n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n < 0:
        errors.add(os.strerror(ctypes.get_errno()))
    return buf.raw[:max(n, 0)]
if not scan(read, bytes_type, near, fd):
    print("no token:", sorted(errors))
"""
# the proof pipe: the harness's only write-only pipe (stdout and stderr are files)
FIND_PROOF = """
import fcntl, os, stat
def write_only_pipe(fd):
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
    except OSError:
        return False
proof = [fd for fd in range(3, 1024) if write_only_pipe(fd)]
"""
FORGE_BY_READING = FIND_PROOF + f"""
import subprocess, sys
near = [str(id(x)) for x in (sys.argv, sys.modules, os)]
subprocess.run([sys.executable, '-c', {READER!r}, str(os.getpid()), str(proof[0]), str(id(bytes)), *near],
               pass_fds=proof)
"""
FORGERIES = {"a: fresh _signal": FORGE_BY_SIGNAL, "b: child reads the harness's memory": FORGE_BY_READING}


def _without_the_lockdown(code: str, python: str) -> tuple[bool, str]:
    """Whether `code` forges a pass in the harness without its kernel lockdown, outside
    namespaces, and its output."""
    assert "    _lockdown()\n" in HARNESS
    token = secrets.token_hex(16).encode()
    proof_r, proof_w = os.pipe()
    with tempfile.TemporaryDirectory() as scratch, open(Path(scratch, "out"), "wb") as out:
        argv = [HARNESS.replace("    _lockdown()\n", "") if a == HARNESS else a
                for a in sandbox._harness(python, scratch, proof_w)]
        subprocess.run(argv, input=token + code.encode(), stdout=out, stderr=out, pass_fds=(proof_w,), timeout=60)
        output = Path(scratch, "out").read_text()
    os.close(proof_w)
    try:
        return sandbox._read_ready(proof_r) == token, output
    finally:
        os.close(proof_r)


def _a_child_may_trace_its_parent() -> bool:
    """Yama (ptrace_scope 1 and above) lets a process trace only its descendants."""
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    return not scope.exists() or scope.read_text().strip() == "0"


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("form", list(FORGERIES))
def test_a_forgery_that_works_in_process_is_refused_by_the_kernel(python, secret, who, form):
    code = FORGERIES[form] + "raise AssertionError('the program itself fails')\n"
    forged, output = _without_the_lockdown(code, python)
    assert forged or (form.startswith("b") and not _a_child_may_trace_its_parent()), output
    r = _run(who, code, python, secret, HOSTILE_LIMITS)  # room for the child interpreter
    assert r.status == "failed" and "Operation not permitted" in r.stdout + r.stderr, (r.stdout, r.stderr)


TRACE = """
import os, subprocess, sys
attach = ("import ctypes, os, sys\\nlibc = ctypes.CDLL(None, use_errno=True)\\n"
          "print('ptrace', libc.ptrace(0x4206, int(sys.argv[1]), 0, 0), os.strerror(ctypes.get_errno()))")
subprocess.run([sys.executable, '-c', attach, str(os.getpid())])
"""


@pytest.mark.parametrize("who", WHO)
def test_no_child_can_trace_the_harness(python, secret, who):
    _, output = _without_the_lockdown(TRACE, python)
    if _a_child_may_trace_its_parent():
        assert output.startswith("ptrace 0 "), output  # PTRACE_SEIZE: attached without stopping it
    r = _run(who, TRACE, python, secret, HOSTILE_LIMITS)
    assert r.passed and r.stdout.startswith("ptrace -1 Operation not permitted"), (r.stdout, r.stderr)


# ----------------------------------------------------------------------------- native code of its own
# Three routes to native code in the harness's process that pass no audited call, each blocked
# by two defences. For each: with every defence on the wrong program fails, as both users; with
# the route's two defences switched off it forges a pass (so the route is real); with either
# one alone it fails, naming what refused it (so each defence holds on its own).
WRONG = "raise AssertionError('the program itself fails')\n"


def _stdlib_only_off(monkeypatch) -> None:
    """The site directories on the path (no -S) and in the snippet's root (not hidden)."""
    harness, interpreter = sandbox._harness, sandbox._interpreter
    assert "-S" in harness("python3", "/scratch", 3)
    monkeypatch.setattr(sandbox, "_harness", lambda *a: [x for x in harness(*a) if x != "-S"])
    monkeypatch.setattr(sandbox, "_interpreter", lambda python: (*interpreter(python)[:2], ()))


def _replacing(name: str, old: str, new: str):
    def off(monkeypatch) -> None:
        text = getattr(sandbox, name)
        assert text.count(old) == 1, old
        monkeypatch.setattr(sandbox, name, text.replace(old, new))
    return off


DEFENCES = {
    "stdlib only": _stdlib_only_off,
    "noexec scratch": _replacing("SETUP", "SCRATCH_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC",
                                 "SCRATCH_FLAGS = MS_NOSUID | MS_NODEV"),
    "extension allowlist": _replacing("HARNESS", ' or (\n                args[1] is not None and args[1] not in files)',
                                      ""),
    "no subinterpreter": _replacing("HARNESS", ', "cpython.PyInterpreterState_New"', ""),
}


def _site_dirs(python: str) -> tuple[str, ...]:
    return sandbox._interpreter(python)[2]


# reading this process's memory for SCAN with libc's `write(fd, address(a), n)`: a page at a
# time into a pipe, where an unmapped page is EFAULT, not a crash
PIPE_READ = """
pr, pw = os.pipe()
def read(start, size):
    pages = []
    for a in range(start, start + size, 4096):
        if write(pw, address(a), 4096) != 4096:
            break
        pages.append(os.read(pr, 4096))
    return b"".join(pages)
"""


def _cffi_forgery(python: str) -> str:
    """Route 1: cffi's backend from the interpreter's site directories calls libc's write on any
    address, which reads the harness's memory."""
    if not any(any(Path(d).glob("_cffi_backend*")) for d in _site_dirs(python)):
        pytest.skip(f"no _cffi_backend in {python}'s site directories to try the route with")
    return FIND_PROOF + SCAN + f"""
import sys
sys.path[:0] = {list(_site_dirs(python))!r}  # were they not on the path already
import _cffi_backend as b
voidp = b.new_pointer_type(b.new_void_type())
args = (b.new_primitive_type("int"), voidp, b.new_primitive_type("size_t"))
write = b.load_library(None).load_function(b.new_function_type(args, b.new_primitive_type("ssize_t"), False), "write")
address = lambda a: b.cast(voidp, a)
""" + PIPE_READ + """
scan(read, id(bytes), [id(x) for x in (sys.argv, sys.modules, os)], proof[0])
"""


STEAL_C = r"""
#include <Python.h>
#include <unistd.h>
/* walks the caller's frames and writes the `token` local of the one that has it to its `proof_fd` */
static PyObject *steal(PyObject *self, PyObject *unused) {
    PyObject *frame = (PyObject *)PyEval_GetFrame();
    Py_XINCREF(frame);
    while (frame != NULL && frame != Py_None) {
        PyObject *locals = PyObject_GetAttrString(frame, "f_locals");
        PyObject *token = locals ? PyDict_GetItemString(locals, "token") : NULL;
        PyObject *fd = locals ? PyDict_GetItemString(locals, "proof_fd") : NULL;
        if (token && fd && PyBytes_Check(token) && PyLong_Check(fd))
            if (write((int)PyLong_AsLong(fd), PyBytes_AS_STRING(token), PyBytes_GET_SIZE(token)) < 0)
                return PyErr_SetFromErrno(PyExc_OSError);
        Py_XDECREF(locals);
        PyObject *back = PyObject_GetAttrString(frame, "f_back");
        Py_DECREF(frame);
        frame = back;
    }
    PyErr_Clear();
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"steal", steal, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "steal", NULL, -1, methods};
PyMODINIT_FUNC PyInit_steal(void) { return PyModule_Create(&module); }
"""


@pytest.fixture(scope="module")
def steal_extension(python, tmp_path_factory) -> tuple[bytes, str]:
    """Route 2's extension, built here with the machine's compiler against `python`'s headers:
    its bytes and file suffix."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc or cc) to build the extension of route 2")
    ask = ("import importlib.machinery as m, sysconfig\nprint(sysconfig.get_paths()['include'])\n"
           "print(m.EXTENSION_SUFFIXES[0])")
    include, suffix = subprocess.run([python, "-I", "-c", ask], capture_output=True, text=True,
                                     check=True).stdout.splitlines()
    if not Path(include, "Python.h").is_file():
        pytest.skip(f"no Python.h in {include} to build the extension of route 2 against")
    build = tmp_path_factory.mktemp("steal")
    (build / "steal.c").write_text(STEAL_C)
    done = subprocess.run([gcc, "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(build / "steal.so"),
                           str(build / "steal.c")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return (build / "steal.so").read_bytes(), suffix


def _extension_forgery(extension: tuple[bytes, str]) -> str:
    """Route 2: a shared object written to the scratch directory and imported."""
    data, suffix = extension
    return f"""
import base64, os, sys
with open('steal{suffix}', 'wb') as f:
    f.write(base64.b64decode({base64.b64encode(data).decode()!r}))
sys.path.insert(0, os.getcwd())
import steal
steal.steal()
"""


SUBINTERPRETER_READS = FIND_PROOF + SCAN + """
import ctypes
write, address = ctypes.CDLL(None).write, ctypes.c_void_p
""" + PIPE_READ + """
scan(read, BYTES_TYPE, NEAR, proof[0])
"""
# Route 3: `_xxsubinterpreters` under another name; its interpreter has no audit hook, and
# ctypes there reads the harness's memory
SUBINTERPRETER_FORGERY = f"""
import importlib.util, os, sys
from importlib.machinery import PathFinder
spec = importlib.util.spec_from_file_location('x._xxsubinterpreters', PathFinder.find_spec('_xxsubinterpreters').origin)
interpreters = importlib.util.module_from_spec(spec)
near = [id(x) for x in (sys.argv, sys.modules, os)]
code = {SUBINTERPRETER_READS!r}.replace('BYTES_TYPE', str(id(bytes))).replace('NEAR', repr(near))
interpreters.run_string(interpreters.create(), code)
"""

#: route: (its two defences, what each says when it refuses the route)
ROUTES = {
    "1: C extension on the path": (("stdlib only", "No module named '_cffi_backend'"),
                                   ("extension allowlist", "sandbox: extension module _cffi_backend is not allowed")),
    "2: shared object written and imported": (("noexec scratch", "failed to map segment from shared object"),
                                              ("extension allowlist",
                                               "sandbox: extension module steal is not allowed")),
    "3: second interpreter": (("extension allowlist",
                               "sandbox: extension module x._xxsubinterpreters is not allowed"),
                              # the hook's PermissionError, as CPython reports a refused creation
                              ("no subinterpreter", "RuntimeError: interpreter creation failed")),
}


@pytest.fixture()
def route_code(request, python, route) -> str:
    """The route's forgery followed by a wrong program."""
    if route.startswith("1"):
        code = _cffi_forgery(python)
    elif route.startswith("2"):
        code = _extension_forgery(request.getfixturevalue("steal_extension"))
    else:
        code = SUBINTERPRETER_FORGERY
    return code + WRONG


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("route", list(ROUTES))
def test_native_code_of_its_own_cannot_forge_a_pass(python, secret, who, route, route_code):
    r = _run(who, route_code, python, secret)
    assert r.status == "failed" and "the program itself fails" not in r.stderr, (r.stdout, r.stderr)
    assert any(refusal in r.stderr for _, refusal in ROUTES[route]), r.stderr


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("on", [None, 0, 1])
def test_each_defence_alone_refuses_the_route(python, monkeypatch, route, route_code, on):
    """`on` None: both of the route's defences off, where the route forges a pass; else that one
    of them alone on, which refuses the route."""
    for k, (defence, _) in enumerate(ROUTES[route]):
        if k != on:
            DEFENCES[defence](monkeypatch)
    r = run_python(route_code, LIMITS, python, allow_unisolated=False)
    if on is None:
        assert r.passed and "the program itself fails" in r.stderr, (r.status, r.stdout, r.stderr)
    else:
        assert r.status == "failed" and ROUTES[route][on][1] in r.stderr, (r.stdout, r.stderr)
