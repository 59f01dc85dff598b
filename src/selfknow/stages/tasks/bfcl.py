"""BFCL tool calling (gorilla-llm/Berkeley-Function-Calling-Leaderboard, AST categories; LADDER
§3, §F.1 Table 32): a response's function calls are parsed into an AST and compared with the
possible answers, with the semantics of gorilla's `ast_checker` for Python:

- the response is the prompt format `[f(a=1, b="x"), g(...)]`, parsed with `ast` (keyword
  arguments only, as BFCL's decoder reads them; a call that does not parse, or passes an
  attribute such as `np.float32` that the decoder cannot read, scores as wrong);
- simple: exactly one call; multiple: exactly one call, checked against the expected function;
  parallel / parallel_multiple: as many calls as answers, matched in any order;
- a call matches when its function name is the expected one, every required parameter is
  present, every given parameter is documented and has a possible answer, each value has the
  documented type (an int passes for a float; one level of nested item types is checked) and
  is among the possible answers (strings compared lower-cased without spaces and `,./-_*^`;
  lists and dicts element by element the same way), and every parameter it leaves out has ""
  (optional) among its possible answers.

Gorilla's files as they are (`files`): the questions file (id, question: turns of {role,
content} messages, function: the function documents) and the possible-answer file
possible_answer/<same name> (id, ground_truth: a list of {function name: {parameter:
[possible values]}}), both JSON lines under a .json name (BFCL_v3_simple.json,
BFCL_v4_simple_python.json).
"""
from __future__ import annotations

import ast
import json
import operator
import re
from pathlib import Path

import pandas as pd

from selfknow.stages.datasets.source import ItemError, at, frame, make_item, read_json_lines, require_fields

PYTHON_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
                "dict": dict, "any": str}
_NESTED = ("array", "tuple")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


class DecodeError(ValueError):
    """A response that is not a list of function calls."""


def _value(node: ast.AST):
    """A call argument's value as BFCL's `resolve_ast_by_type` reads it; arithmetic on number
    literals is computed here without `eval`."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _value(node.left), _value(node.right)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (left, right)):
            try:
                return _ARITHMETIC[type(node.op)](left, right)
            except (ArithmeticError, ValueError) as err:
                raise DecodeError(f"cannot compute {ast.unparse(node)}: {err}") from None
    if isinstance(node, ast.Name):
        return node.id  # a variable name stands for itself, as a string
    if isinstance(node, ast.Call):
        return _call(node) if node.keywords else ast.unparse(node)
    if isinstance(node, (ast.Subscript, ast.BinOp)):
        return ast.unparse(node)
    # gorilla's resolve_ast_by_type has no case for an attribute (`np.float32`) and raises
    # "Unsupported AST type" (bfcl_eval/model_handler/utils.py at 0c92701, read 2026-12-01)
    raise DecodeError(f"unsupported argument {ast.unparse(node)!r}")


def _call(node: ast.Call) -> dict:
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name):
        raise DecodeError(f"not a function name: {ast.unparse(node.func)!r}")
    parts.append(f.id)
    return {".".join(reversed(parts)): {kw.arg: _value(kw.value) for kw in node.keywords if kw.arg is not None}}


def decode(response: str) -> list[dict]:
    """The calls of a response in BFCL's prompt format, as [{name: {param: value}}]: backticks,
    newlines and spaces around it are stripped, brackets added where missing, then wrapping single
    quotes removed (BFCL's `default_decode_ast_prompting` and `ast_parse`)."""
    text = response.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    try:
        tree = ast.parse(text.strip().strip("'"), mode="eval").body
    except (SyntaxError, ValueError) as err:
        raise DecodeError(f"not a list of calls: {err}") from None
    if not isinstance(tree, ast.List) or not tree.elts or not all(isinstance(e, ast.Call) for e in tree.elts):
        raise DecodeError("not a list of function calls")
    return [_call(e) for e in tree.elts]


def standardize(s: str) -> str:
    """BFCL's `standardize_string`: no spaces or `,./-_*^`, lower case, single quotes as double."""
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def _std(v):
    return standardize(v) if isinstance(v, str) else v


def _answer_type(possible: list):
    return next((type(a) for a in possible if a != ""), None)


def _type_ok(value, possible: list, expected: type, nested: type | None) -> tuple[bool, bool]:
    """(type accepted, value is a variable name): the value has the documented type (items
    checked one level deep against some possible answer), or the possible answers are strings
    standing for a variable and the value is one too."""
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type != expected
    if type(value) is expected:
        if nested is None:
            return True, is_variable
        for item in possible:
            if type(item) is not list or all(_type_ok(v, item, nested, None)[0] for v in value):
                return True, is_variable
        return False, is_variable
    return answer_type is not None and type(value) is answer_type, True


def _dict_ok(value: dict, possible: list) -> bool:
    for answer in possible:
        if answer == "":
            continue
        if all(k in answer and _std(v) in [_std(a) for a in answer[k]] for k, v in value.items()) and \
                all(k in value or "" in vals for k, vals in answer.items()):
            return True
    return False


def _value_ok(value, possible: list, expected: type, nested: type | None, is_variable: bool) -> bool:
    if not is_variable:
        if expected is dict:
            return _dict_ok(value, possible)
        if expected is list and nested is dict:
            return any(len(value) == len(answer) and all(_dict_ok(v, [a]) for v, a in zip(value, answer))
                       for answer in possible)
        if expected is str:
            return standardize(value) in [standardize(a) for a in possible if isinstance(a, str)]
        if expected is list:
            return [_std(v) for v in value] in [[_std(a) for a in answer] for answer in possible]
    return value in possible


def check_call(doc: dict, call: dict, answer: dict) -> str | None:
    """Why one decoded call does not match one possible answer {name: {param: [values]}}, or
    None when it matches (gorilla's `simple_function_checker`, Python)."""
    name, possible = next(iter(answer.items()))
    if name not in call:
        return f"function {name!r} not called"
    params = call[name]
    properties = doc["parameters"]["properties"]
    missing = [p for p in doc["parameters"].get("required", []) if p not in params]
    if missing:
        return f"missing required parameter(s) {missing}"
    for param, value in params.items():
        if param not in properties or param not in possible:
            return f"unexpected parameter {param!r}"
        type_name = properties[param]["type"]
        if type_name not in PYTHON_TYPES:
            raise ValueError(f"BFCL: function {name}: parameter {param}: unknown type {type_name!r}")
        expected = PYTHON_TYPES[type_name]
        nested = PYTHON_TYPES[properties[param]["items"]["type"]] if type_name in _NESTED else None
        if type_name == "tuple" and type(value) is tuple:
            value = list(value)
        if type_name == "float" and type(value) is int:
            value = float(value)
        type_ok, is_variable = _type_ok(value, possible[param], expected, nested)
        if not type_ok:
            return f"parameter {param!r}: {value!r} is not of type {type_name}"
        if not _value_ok(value, possible[param], expected, nested, is_variable):
            return f"parameter {param!r}: {value!r} is not among {possible[param]}"
    left_out = [p for p, vals in possible.items() if p not in params and "" not in vals]
    if left_out:
        return f"parameter(s) {left_out} left out but not optional"
    return None


def _doc(functions: list[dict], name: str) -> dict:
    for f in functions:
        if f["name"] == name:
            return f
    raise ValueError(f"BFCL: no function document for the expected function {name!r}")


def check(functions: list[dict], calls: list[dict], ground_truth: list[dict], category: str) -> str | None:
    """Why the decoded calls fail the test case, or None when they pass (gorilla's `ast_checker`)."""
    if len(calls) != len(ground_truth):
        return f"{len(calls)} call(s), expected {len(ground_truth)}"
    if "parallel" not in category:
        answer = ground_truth[0]
        return check_call(_doc(functions, next(iter(answer))), calls[0], answer)
    unmatched = list(range(len(calls)))
    for answer in ground_truth:
        doc = _doc(functions, next(iter(answer)))
        hit = next((i for i in unmatched if check_call(doc, calls[i], answer) is None), None)
        if hit is None:
            return f"no call matches the expected {next(iter(answer))!r}"
        unmatched.remove(hit)
    return None


def score(functions: list[dict], ground_truth: list[dict], category: str,
          response: str) -> tuple[list[dict] | None, bool, str | None]:
    """(decoded calls, correct, why not): a response that does not decode (calls None) is wrong."""
    try:
        calls = decode(response)
    except DecodeError as err:
        return None, False, f"decode: {err}"
    error = check(functions, calls, ground_truth, category)
    return calls, error is None, error


def process(questions: list[dict], answers: list[dict], name: str, category: str, where: str,
            answers_where: str | None = None) -> pd.DataFrame:
    """Items of one category: question = its user messages, answer = the possible answers (JSON),
    with the function documents and possible answers as JSON columns `functions` and
    `ground_truth`; questions and answers are paired by id. `where` / `answers_where`: the
    two files (`source.Where`)."""
    require_fields(questions, ("id", "question", "function"), where)
    require_fields(answers, ("id", "ground_truth"), answers_where or f"{where} (possible answers)")
    truth = {a["id"]: a["ground_truth"] for a in answers}
    items, functions, grounds = [], [], []
    for i, q in enumerate(questions):
        if q["id"] not in truth:
            raise ItemError(f"{at(where, i)}: no possible answer for id {q['id']!r}")
        turns = q["question"]
        user = [m["content"] for turn in turns for m in turn if m.get("role") == "user"]
        if not user:
            raise ItemError(f"{at(where, i)}: no user message")
        ground = json.dumps(truth[q["id"]], sort_keys=True)
        items.append(make_item(q["id"], name, category, "\n".join(user), None, ground, [], "test"))
        functions.append(json.dumps(q["function"], sort_keys=True))
        grounds.append(ground)
    df = frame(items)
    df["functions"] = functions
    df["ground_truth"] = grounds
    return df


def files(spec: dict) -> tuple[Path, Path]:
    """The questions and possible-answer files of `spec` in gorilla's layout, as they are:
    `path` (any name; JSON lines, .json or .jsonl) with `possible_answer_path`, by default
    `possible_answer/<the same name>` beside it; else `file` (e.g. BFCL_v3_simple.json) and
    `possible_answer/<file>` downloaded from the hub dataset `hub_id` at `revision`."""
    if "path" in spec:
        questions = Path(spec["path"])
        if "possible_answer_path" in spec:
            return questions, Path(spec["possible_answer_path"])
        return questions, questions.parent / "possible_answer" / questions.name
    from huggingface_hub import hf_hub_download  # lazy: only paper-scale configs read the hub

    def fetch(filename: str) -> Path:
        return Path(hf_hub_download(spec["hub_id"], filename, repo_type="dataset", revision=spec["revision"]))

    return fetch(spec["file"]), fetch(f"possible_answer/{spec['file']}")


def load(name: str, spec: dict) -> pd.DataFrame:
    """`spec`: the category's files (`files`) and `category` (simple, multiple, parallel or
    parallel_multiple)."""
    questions_path, answers_path = files(spec)
    for path in (questions_path, answers_path):
        if not path.is_file():
            raise ItemError(f"{name}: local copy {path} does not exist")
    questions, where = read_json_lines(name, questions_path)
    answers, answers_where = read_json_lines(name, answers_path)
    return process(questions, answers, name, spec["category"], where, answers_where)
