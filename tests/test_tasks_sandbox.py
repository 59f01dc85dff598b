"""The code sandbox against hostile snippets, run by the current user and (when the tests run as
root, as CI does) by an unprivileged user: each must end as a scored failure within its limits,
and afterwards the machine must hold no file the snippet wrote outside its scratch directory,
no process it started, and its output no secret of its parent."""
from __future__ import annotations

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

from selfknow.stages.tasks import sandbox
from selfknow.stages.tasks.sandbox import Isolation, Limits, SandboxError, run_python

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


def _as_user(argv: list[str], env: dict[str, str]) -> list[str]:
    return ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", "env", "-i",
            *(f"{k}={v}" for k, v in env.items()), *argv]


def _run(who: str, code: str, python: str, secret: str, limits: Limits = LIMITS,
         home: str = "/nonexistent") -> sandbox.Result:
    if who == "me":
        return run_python(code, limits, python, allow_unisolated=False)
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "SELFKNOW_TEST_SECRET": secret}
    argv = _as_user(["/usr/bin/python3", "-I", "-c", _DRIVER, str(REPO / "src"), json.dumps(asdict(limits)), python],
                    env)
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
HOSTILE_LIMITS = Limits(wall_s=10.0, cpu_s=1, memory_mb=256, max_processes=6, max_file_mb=4, output_bytes=4000)

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
        code = f"import os\nprint(os.listdir({str(home)!r}))\nprint(open({str(home / '.netrc')!r}).read())"
        r = _run("unprivileged", code, python, secret, home=str(home))
        assert r.status == "failed" and "No such file" in r.stderr and secret not in r.stdout + r.stderr, r.stderr
        assert r.stdout.strip() == "[]"
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
    limits = Limits(wall_s=1.5, cpu_s=1, memory_mb=256, max_processes=2, max_file_mb=4, output_bytes=4000)
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


def test_output_is_cut_to_its_tail(python):
    r = run_python("print('a' * 10000 + 'END')", LIMITS, python, allow_unisolated=False)
    assert r.passed and len(r.stdout) == LIMITS.output_bytes and r.stdout.endswith("END\n")


def test_limits_are_checked():
    with pytest.raises(ValueError, match="sandbox limit memory_mb must be a positive number"):
        Limits(wall_s=1, cpu_s=1, memory_mb=0, max_processes=1, max_file_mb=1, output_bytes=10)
    with pytest.raises(ValueError, match="cpu_s must be a whole number"):
        Limits(wall_s=1, cpu_s=1.5, memory_mb=10, max_processes=1, max_file_mb=1, output_bytes=10)


def test_an_interpreter_that_cannot_start_is_a_sandbox_error(tmp_path):
    with pytest.raises(SandboxError, match="cannot start the interpreter"):
        sandbox.isolation(str(tmp_path / "no-python"))
