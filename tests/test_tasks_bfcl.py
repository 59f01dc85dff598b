"""BFCL: calls compared by AST with gorilla's ast_checker semantics, on hand-made test cases in
the leaderboard's row schema."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets.source import ItemError
from selfknow.stages.tasks import bfcl

from conftest import REPO

AREA = {"name": "calculate_triangle_area", "description": "Area of a triangle.",
        "parameters": {"type": "dict", "required": ["base", "height"], "properties": {
            "base": {"type": "integer"}, "height": {"type": "float"}, "unit": {"type": "string"}}}}
AREA_TRUTH = [{"calculate_triangle_area": {"base": [10], "height": [5.0], "unit": ["units", "cm", ""]}}]

WEATHER = {"name": "weather.get", "description": "Forecast.",
           "parameters": {"type": "dict", "required": ["city"], "properties": {
               "city": {"type": "string"}, "days": {"type": "array", "items": {"type": "integer"}},
               "options": {"type": "dict", "properties": {}}}}}


def _score(response, functions=(AREA,), truth=AREA_TRUTH, category="simple"):
    """(correct, why not)"""
    return bfcl.score(list(functions), truth, category, response)[1:]


@pytest.mark.parametrize("response", [
    "[calculate_triangle_area(base=10, height=5.0, unit='units')]",
    'calculate_triangle_area(height=5, base=10, unit="UNITS")',       # order, int for float, case
    "```\n[calculate_triangle_area(base=10, height=5)]\n```",          # unit is optional
    "[calculate_triangle_area(base=2*5, height=5.0)]",                   # arithmetic on literals
])
def test_an_ast_equal_call_passes(response):
    assert _score(response) == (True, None)


@pytest.mark.parametrize("response, why", [
    ("[calculate_triangle_area(base=12, height=5.0)]", "parameter 'base': 12 is not among [10]"),
    ("[calculate_triangle_area(base=10, height=5.0, unit='m')]", "parameter 'unit': 'm' is not among"),
    ("[calculate_triangle_area(base=10)]", "missing required parameter(s) ['height']"),
    ("[calculate_triangle_area(base='10', height=5.0)]", "parameter 'base': '10' is not of type integer"),
    ("[calculate_triangle_area(base=10.0, height=5.0)]", "not of type integer"),
    ("[calculate_triangle_area(base=10, height=5.0, colour='red')]", "unexpected parameter 'colour'"),
    ("[triangle_area(base=10, height=5.0)]", "function 'calculate_triangle_area' not called"),
    # BFCL reads keyword arguments only
    ("[calculate_triangle_area(10, 5.0)]", "missing required parameter(s) ['base', 'height']"),
    ("[calculate_triangle_area(base=10, height=5.0), calculate_triangle_area(base=10, height=5.0)]",
     "2 call(s), expected 1"),
    ("The area is 25.", "decode:"),
    # gorilla's decoder raises "Unsupported AST type" on an attribute argument
    ("[calculate_triangle_area(base=10, height=5.0, unit=np.float32)]", "decode: unsupported argument 'np.float32'"),
    ("[calculate_triangle_area(base=10, height=math.pi)]", "decode: unsupported argument 'math.pi'"),
    ("[]", "decode:"),
])
def test_a_wrong_call_fails(response, why):
    ok, error = _score(response)
    assert not ok and why in error


def test_a_parameter_left_out_must_be_optional():
    truth = [{"calculate_triangle_area": {"base": [10], "height": [5.0], "unit": ["units"]}}]
    assert _score("[calculate_triangle_area(base=10, height=5.0)]", truth=truth) == \
        (False, "parameter(s) ['unit'] left out but not optional")


def test_strings_are_compared_without_case_spaces_or_punctuation():
    truth = [{"weather.get": {"city": ["San Francisco, CA"], "days": [""], "options": [""]}}]
    assert _score("[weather.get(city='san francisco ca')]", (WEATHER,), truth)[0]
    assert _score("[weather.get(city='san francisco')]", (WEATHER,), truth)[0] is False


def test_lists_dicts_and_nested_types():
    truth = [{"weather.get": {"city": ["Paris"], "days": [[1, 2]], "options": [{"units": ["metric", "SI"]}]}}]
    assert _score("[weather.get(city='Paris', days=[1, 2], options={'units': 'si'})]", (WEATHER,), truth)[0]
    assert not _score("[weather.get(city='Paris', days=[2, 1], options={'units': 'si'})]", (WEATHER,), truth)[0]
    ok, why = _score("[weather.get(city='Paris', days=['1', 2], options={'units': 'si'})]", (WEATHER,), truth)
    assert not ok and "not of type array" in why
    assert not _score("[weather.get(city='Paris', days=[1, 2], options={'units': 'imperial'})]",
                      (WEATHER,), truth)[0]


def test_a_variable_name_counts_as_the_string_it_spells():
    truth = [{"calculate_triangle_area": {"base": ["b"], "height": [5.0], "unit": [""]}}]
    assert _score("[calculate_triangle_area(base=b, height=5.0)]", truth=truth)[0]


def test_multiple_checks_against_the_expected_function():
    functions = (WEATHER, AREA)
    assert _score("[calculate_triangle_area(base=10, height=5)]", functions, AREA_TRUTH, "multiple")[0]
    assert not _score("[weather.get(city='Paris')]", functions, AREA_TRUTH, "multiple")[0]


def test_parallel_calls_match_in_any_order():
    truth = [{"calculate_triangle_area": {"base": [10], "height": [5.0], "unit": [""]}},
             {"calculate_triangle_area": {"base": [3], "height": [4.0], "unit": [""]}}]
    calls = ["calculate_triangle_area(base=3, height=4)", "calculate_triangle_area(base=10, height=5)"]
    assert _score(f"[{calls[0]}, {calls[1]}]", truth=truth, category="parallel") == (True, None)
    assert _score(f"[{calls[1]}, {calls[0]}]", truth=truth, category="parallel") == (True, None)
    ok, why = _score(f"[{calls[0]}, {calls[0]}]", truth=truth, category="parallel")
    assert not ok and "no call matches the expected 'calculate_triangle_area'" in why


def test_rows_become_items(tmp_path):
    q = tmp_path / "simple.jsonl"
    a = tmp_path / "simple_answers.jsonl"
    q.write_text(json.dumps({"id": "simple_0", "function": [AREA], "question": [[
        {"role": "user", "content": "Area of a triangle with base 10 and height 5?"}]]}) + "\n")
    a.write_text(json.dumps({"id": "simple_0", "ground_truth": AREA_TRUTH}) + "\n")
    items = bfcl.load("bfcl_simple", {"path": str(q), "possible_answer_path": str(a), "category": "simple"})
    row = items.iloc[0]
    assert row.item_id == "simple_0" and row.domain == "simple" and row.question.startswith("Area of")
    assert bfcl.score(json.loads(row.functions), json.loads(row.ground_truth), row.domain,
                      "[calculate_triangle_area(base=10, height=5)]") == \
        ([{"calculate_triangle_area": {"base": 10, "height": 5}}], True, None)
    a.write_text(json.dumps({"id": "simple_1", "ground_truth": AREA_TRUTH}) + "\n")
    with pytest.raises(ItemError, match=r"bfcl_simple: \S+simple.jsonl: line 1: no possible answer for id 'simple_0'"):
        bfcl.load("bfcl_simple", {"path": str(q), "possible_answer_path": str(a), "category": "simple"})


#: two rows of BFCL_v4_simple_python.json and its possible_answer/ file, verbatim in gorilla's schema
#: (ShishirPatil/gorilla, berkeley-function-call-leaderboard/bfcl_eval/data, Apache-2.0)
GORILLA_QUESTIONS = [
    {"id": "simple_python_0", "question": [[{"role": "user", "content": "Find the area of a triangle with a base "
                                                                         "of 10 units and height of 5 units."}]],
     "function": [{"name": "calculate_triangle_area", "description": "Calculate the area of a triangle given its "
                   "base and height.", "parameters": {"type": "dict", "properties": {
                       "base": {"type": "integer", "description": "The base of the triangle."},
                       "height": {"type": "integer", "description": "The height of the triangle."},
                       "unit": {"type": "string", "description": "The unit of measure (defaults to 'units' if not "
                                "specified)"}}, "required": ["base", "height"]}}]},
    {"id": "simple_python_1", "question": [[{"role": "user", "content": "Calculate the factorial of 5 using math "
                                                                         "functions."}]],
     "function": [{"name": "math.factorial", "description": "Calculate the factorial of a given number.",
                   "parameters": {"type": "dict", "properties": {"number": {
                       "type": "integer", "description": "The number for which factorial needs to be calculated."}},
                       "required": ["number"]}}]},
]
GORILLA_ANSWERS = [
    {"id": "simple_python_0", "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5],
                                                                             "unit": ["units", ""]}}]},
    {"id": "simple_python_1", "ground_truth": [{"math.factorial": {"number": [5]}}]},
]


def _gorilla_layout(root, name):
    """`root`/<name> and `root`/possible_answer/<name>: JSON lines under a .json name."""
    (root / "possible_answer").mkdir(parents=True, exist_ok=True)
    (root / name).write_text("".join(json.dumps(r) + "\n" for r in GORILLA_QUESTIONS))
    (root / "possible_answer" / name).write_text("".join(json.dumps(r) + "\n" for r in GORILLA_ANSWERS))


def _check_gorilla_items(items):
    assert items["item_id"].tolist() == ["simple_python_0", "simple_python_1"]
    row = items.iloc[1]
    assert row.question == "Calculate the factorial of 5 using math functions."
    assert bfcl.score(json.loads(row.functions), json.loads(row.ground_truth), "simple", "[math.factorial(number=5)]")[1]


@pytest.mark.parametrize("name", ["BFCL_v4_simple_python.json", "BFCL_v3_simple.json"])
def test_gorillas_files_are_read_as_they_are_from_a_path(tmp_path, name):
    _gorilla_layout(tmp_path / "data", name)
    _check_gorilla_items(bfcl.load("bfcl_simple", {"path": str(tmp_path / "data" / name), "category": "simple"}))
    # an explicit possible-answer file anywhere else
    (tmp_path / "data" / "possible_answer" / name).rename(tmp_path / "answers.json")
    with pytest.raises(ItemError, match=r"possible_answer/BFCL_v.*\.json does not exist"):
        bfcl.load("bfcl_simple", {"path": str(tmp_path / "data" / name), "category": "simple"})
    _check_gorilla_items(bfcl.load("bfcl_simple", {"path": str(tmp_path / "data" / name), "category": "simple",
                                                   "possible_answer_path": str(tmp_path / "answers.json")}))


def test_gorillas_files_are_read_from_the_hub_dataset(tmp_path, monkeypatch):
    import huggingface_hub

    _gorilla_layout(tmp_path / "hub", "BFCL_v3_simple.json")
    asked = []

    def download(repo_id, filename, *, repo_type, revision):
        asked.append((repo_id, filename, repo_type, revision))
        return str(tmp_path / "hub" / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    spec = {"hub_id": "gorilla-llm/Berkeley-Function-Calling-Leaderboard", "revision": "abc",
            "file": "BFCL_v3_simple.json", "category": "simple"}
    _check_gorilla_items(bfcl.load("bfcl_simple", spec))
    assert asked == [(spec["hub_id"], "BFCL_v3_simple.json", "dataset", "abc"),
                     (spec["hub_id"], "possible_answer/BFCL_v3_simple.json", "dataset", "abc")]


def test_verdicts_match_gorillas_ast_checker_on_leaderboard_cases():
    """24 leaderboard test cases (3 from each Python AST category of BFCL v4, Apache-2.0), each
    with calls built from its possible answers and then perturbed (a wrong value, a value as a
    string, a parameter missing or added, optional ones left out, parallel calls reversed); the
    verdicts were produced by bfcl-eval 2026.3.23's own `ast_checker` (Python)."""
    cases = [json.loads(line) for line in
             (REPO / "tests" / "fixtures" / "tasks" / "bfcl_reference_verdicts.jsonl").read_text().splitlines()]
    verdicts = [(c["id"], r["variant"], bfcl.score(c["function"], c["ground_truth"], c["category"], r["response"])[1],
                 r["valid"]) for c in cases for r in c["responses"]]
    assert len(verdicts) == 193 and sum(v[3] for v in verdicts) == 83
    assert [v for v in verdicts if v[2] != v[3]] == []
