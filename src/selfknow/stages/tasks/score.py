"""One entry point for a protocol job: score a model's response to an item of any task, given
the item as its loader returned it (a row of the frame, or a dict with the same fields).
ReAct is not here: its trajectories carry their score (`react.load`, column `correct`)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from . import bbh, bfcl, gsm8k, humaneval, mmlu_pro
from .humaneval import CodeRun


@dataclass(frozen=True)
class Score:
    """`parsed`: what was read from the response (an option, a number, a BBH answer; for
    HumanEval the sandbox's status; for BFCL the decoded calls as JSON), None when nothing
    could be; `detail`: why a BFCL call failed or the tail of HumanEval's stderr."""

    correct: bool
    parsed: str | None
    detail: str | None = None


TASKS = ("mmlu_pro", "bbh", "gsm8k", "humaneval", "bfcl")


def score_item(task: str, item: Mapping, response: str, *, code: CodeRun | None = None,
               bbh_lenient: bool | None = None) -> Score:
    """Score `response` to `item` of `task` (one of TASKS); HumanEval needs how its code runs
    (`code`), BBH whether it is scored leniently."""
    if task in ("mmlu_pro", "gsm8k"):                # read from the response alone
        pred, ok = {"mmlu_pro": mmlu_pro, "gsm8k": gsm8k}[task].score(response, item["answer"])
        return Score(ok, pred)
    if task == "bbh":
        if bbh_lenient is None:
            raise ValueError("BBH scoring: pass bbh_lenient (False: lm-eval's exact match)")
        pred, ok = bbh.score(item["domain"], response, item["answer"], bbh_lenient)
        return Score(ok, pred)
    if task == "humaneval":
        if code is None:
            raise ValueError("HumanEval scoring runs code: pass how it runs (code)")
        result = humaneval.run(item["question"], response, item["test"], item["entry_point"], code)
        return Score(result.passed, result.status, None if result.passed else result.stderr)
    if task == "bfcl":
        calls, ok, error = bfcl.score(json.loads(item["functions"]), json.loads(item["ground_truth"]), item["domain"],
                                      response)
        return Score(ok, None if calls is None else json.dumps(calls, sort_keys=True, default=repr), error)
    raise ValueError(f"unknown task {task!r}; known: {list(TASKS)}")
