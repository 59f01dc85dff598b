"""HumanEval (openai/openai_humaneval; LADDER §3, §F.1 Table 32): a completion passes when the
task's tests pass on it, run in the sandbox (`selfknow.stages.tasks.sandbox`); pass@k as Chen et al.
(2021) estimate it.

The program is the one openai/human-eval's `check_correctness` runs:
prompt + completion + "\\n" + test + "\\n" + f"check({entry_point})", not as `__main__`, within
3 s by default (config `ladder.extension.sandbox.wall_s`); it passes only when `check` returns
(the sandbox's proof, never the exit status). A chat model often answers with the whole
function in a markdown-fenced block; official scoring runs the completion as it is (a fence is
a syntax error). With `unfence` (config `ladder.extension.unfence_humaneval`, off by default: a
deviation) the fenced code is used instead, placed after the prompt (whose stub, a signature
with a docstring, is valid Python that the full definition replaces, while its imports stay in
scope).

Hub row schema: task_id, prompt, canonical_solution, test, entry_point.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from math import comb

import pandas as pd

from selfknow.stages.datasets.source import frame, make_item, read_rows, require_fields

from .sandbox import Limits, Result, run_python

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CodeRun:
    """How completions run (config `ladder.extension.sandbox` and `unfence_humaneval`): the
    sandbox's interpreter and limits, whether fenced code is unfenced, and whether code may run
    where the sandbox cannot isolate it."""

    python: str
    limits: Limits
    unfence: bool
    allow_unisolated: bool

    @classmethod
    def from_config(cls, sandbox: Mapping, unfence: bool) -> CodeRun:
        """From config `ladder.extension.sandbox`: the interpreter (`python`),
        `allow_unisolated` and the `Limits` fields."""
        limits = Limits(**{k: v for k, v in sandbox.items() if k not in ("python", "allow_unisolated")})
        return cls(python=sandbox["python"], limits=limits, unfence=unfence,
                   allow_unisolated=sandbox["allow_unisolated"])


def fenced(response: str) -> bool:
    """Whether the response holds a markdown-fenced code block."""
    return _FENCE.search(response) is not None


def completion_code(response: str) -> str:
    """The code of a response: the first fenced block if there is one, else the response."""
    m = _FENCE.search(response)
    return m.group(1) if m else response


def program(prompt: str, completion: str, test: str, entry_point: str, unfence: bool) -> str:
    """The script that decides the task (human-eval's `check_program`); with `unfence`, the
    fenced code of the completion, starting on a new line after the prompt when it defines
    `entry_point` itself."""
    code = completion
    if unfence:
        code = completion_code(completion)
        if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
            code = "\n" + code
    return f"{prompt}{code}\n{test}\ncheck({entry_point})\n"


def run(prompt: str, completion: str, test: str, entry_point: str, code: CodeRun) -> Result:
    """Run one completion against its task's tests in the sandbox; `result.passed` (check
    returned) is the score."""
    return run_python(program(prompt, completion, test, entry_point, code.unfence), code.limits, code.python,
                      allow_unisolated=code.allow_unisolated)


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
