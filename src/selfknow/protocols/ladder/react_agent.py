"""The ReAct records of LADDER's held-out prediction (§4.4, §E.10, §F.4, Table 34), produced
here because the authors released none.

A ReAct agent (Yao et al., 2023: interleaved Thought / Action / Observation) answers each
question of a subject-labelled multiple-choice pool. Per step the model continues the
transcript with a thought and one action (prompts/react_agent.txt documents the tools):

* `calculate[expr]`  the value of an arithmetic expression (`calculate`); a malformed or
                     unsupported expression returns an "Error: ..." observation, not a crash;
* `finish[letter]`   the final answer; the trajectory ends.

A reply with no parsable action gets an "Invalid action" observation and costs its step. A
trajectory succeeds when it finishes within `max_steps` steps with the gold option letter;
running out of steps is a failure (success as the task defines it: the question's answer).
Each configuration (a model and its step limit) also states its zero-shot profile over the
pool's subjects before any trajectory: LADDER's L1 prior prompt (`prompted.zs_prior`).

Records are written in the format `selfknow.stages.tasks.react` reads (`test.jsonl`) with the
profiles beside them (`zero_shot.jsonl`), so Table 34 reads produced and recorded
trajectories alike.
"""
from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pandas as pd

from selfknow.models.base import LM

from .answering import load_prompt
from .prompted import zs_prior

LETTERS = "ABCDEFGHIJ"
_ACTION = re.compile(r"Action\s*:\s*(\w+)\s*\[(.*)\]", re.DOTALL)
_LETTER = re.compile(r"\b([A-J])\b")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
#: exponents above this are refused, so `calculate[9**9**9]` cannot hang the job
MAX_EXPONENT = 1000


class ToolError(ValueError):
    """A tool call the tool cannot serve; its message becomes the observation."""


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right} is too large")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ToolError(f"unsupported expression element {ast.dump(node)[:40]}")


def calculate(expression: str) -> str:
    """The value of an arithmetic expression (numbers, + - * / // ** %, parentheses)."""
    try:
        value = _eval(ast.parse(expression.strip(), mode="eval").body)
    except SyntaxError:
        raise ToolError(f"cannot parse {expression.strip()!r} as an arithmetic expression") from None
    except (ZeroDivisionError, OverflowError) as err:
        raise ToolError(str(err)) from None
    return repr(round(value, 10)) if isinstance(value, float) else str(value)


def parse_step(reply: str) -> tuple[str, str | None, str]:
    """(thought, tool, argument) of one model reply; tool None when it holds no action. The
    reply is cut at a self-written "Observation:" (a model that ignores the stop string)."""
    reply = reply.split("Observation:")[0]
    m = _ACTION.search(reply)
    thought = (reply[:m.start()] if m else reply).strip()
    thought = re.sub(r"^Thought\s*:\s*", "", thought)
    if not m:
        return thought, None, ""
    return thought, m.group(1).lower(), m.group(2).strip()


@dataclass
class Trajectory:
    """One question's run: its steps, final answer and success."""
    item: Mapping
    steps: list[dict] = field(default_factory=list)
    answer: str | None = None

    @property
    def done(self) -> bool:
        return self.answer is not None

    def transcript(self) -> str:
        return "".join(f"Thought: {s['thought']}\nAction: {s['action']}\nObservation: {s['observation']}\n"
                       for s in self.steps if s["observation"] is not None)

    def act(self, reply: str) -> None:
        thought, tool, arg = parse_step(reply)
        action = f"{tool}[{arg}]" if tool else ""
        if tool == "finish":
            m = _LETTER.search(arg.upper())
            self.answer = m.group(1) if m else arg
            self.steps.append({"thought": thought, "action": action, "observation": None})
            return
        if tool == "calculate":
            try:
                observation = calculate(arg)
            except ToolError as err:
                observation = f"Error: {err}"
        elif tool is None:
            observation = "Invalid action: end with 'Action: calculate[expression]' or 'Action: finish[letter]'."
        else:
            observation = f"Error: unknown tool {tool!r}; the tools are calculate and finish."
        self.steps.append({"thought": thought, "action": action, "observation": observation})

    def record(self, model: str, config: str) -> dict:
        item = self.item
        return {"id": str(item["item_id"]), "domain": str(item["domain"]), "question": str(item["question"]),
                "steps": self.steps,
                "answer": self.answer or "", "success": self.answer == item["answer"], "model": model,
                "config": config}


def agent_prompt(item: Mapping, transcript: str) -> str:
    options = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(item["choices"]))
    return load_prompt("react_agent").substitute(question=item["question"], options=options,
                                                 transcript=transcript.rstrip("\n"))


def run_agent(lm: LM, items: pd.DataFrame, *, max_steps: int, max_new_tokens: int, chat: bool) -> list[Trajectory]:
    """The ReAct loop on every item (batched per step across the unfinished trajectories)."""
    runs = [Trajectory(r) for r in items.to_dict("records")]
    for _ in range(max_steps):
        active = [t for t in runs if not t.done]
        if not active:
            break
        replies = lm.generate([agent_prompt(t.item, t.transcript()) for t in active], max_new_tokens=max_new_tokens,
                              stop=["\nObservation:"], chat=chat, temperature=0.0)
        for t, g in zip(active, replies):
            t.act(g.text)
    return runs


def pick_items(items: pd.DataFrame, per_domain: int, seed: int) -> pd.DataFrame:
    """`per_domain` questions of each subject (all of a smaller one), drawn with `seed`."""
    parts = [g.sample(n=min(per_domain, len(g)), random_state=seed) for _, g in items.groupby("domain", sort=True)]
    return pd.concat(parts).sort_values(["domain", "item_id"]).reset_index(drop=True)


def _write_jsonl(rows: list[dict], path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def react_job(items_path: str, spec: dict, out_dir: str, *, model: str, config: str, per_domain: int,
              max_steps: int, max_new_tokens: int, prior_mode: str, prior_max_new_tokens: int, seed: int,
              cache_dir: str | None = None) -> dict:
    """One ReAct configuration: writes `out_dir`/zero_shot.jsonl (the L1 profile, asked
    first) and `out_dir`/test.jsonl (one trajectory per picked question)."""
    from selfknow.config import is_chat
    from selfknow.models import load_lm
    from selfknow.records import read_parquet

    items = pick_items(read_parquet(items_path), per_domain, seed)
    if items.empty:
        raise ValueError(f"{items_path}: no test items for the ReAct configuration {config!r}")
    lm = load_lm(spec, None, cache_dir=cache_dir)
    chat = is_chat(spec)
    prior = zs_prior(lm, sorted(items["domain"].unique()), model=model, mode=prior_mode,
                     max_new_tokens=prior_max_new_tokens, chat=chat)
    runs = run_agent(lm, items, max_steps=max_steps, max_new_tokens=max_new_tokens, chat=chat)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_jsonl([{"model": model, "config": config, "domain": r["domain"], "p_hat": float(r["p_hat"])}
                  for r in prior.to_dict("records")], out / "zero_shot.jsonl")
    records = [t.record(model, config) for t in runs]
    _write_jsonl(records, out / "test.jsonl")
    return {"records": len(records), "successes": sum(r["success"] for r in records),
            "finished": sum(t.done for t in runs), "steps": sum(len(t.steps) for t in runs),
            "model_calls": lm.stats.misses, "cache_hits": lm.stats.hits}
