"""BIG-Bench Hard (suzgun/BIG-Bench-Hard, hub copy lukaemon/bbh, one config per task; LADDER
§E.1 Table 15): exact match of the answer a chain-of-thought response states after "So the
answer is", with each task's answer form normalised as below.

Hub row schema: input, target. A local copy (`path`) holds one task's rows, named by
`config_name` as on the hub.
"""
from __future__ import annotations

import re

import pandas as pd

from selfknow.stages.datasets.source import ItemError, frame, make_item, read_rows, require_fields

# The answer form of each of the 27 tasks' targets: an option "(A)"; a label (True/False,
# Yes/No, valid/invalid); an integer; a sequence of words; a sequence of brackets.
TASK_FORMS = {
    "boolean_expressions": "label", "causal_judgement": "label", "date_understanding": "choice",
    "disambiguation_qa": "choice", "dyck_languages": "brackets", "formal_fallacies": "label",
    "geometric_shapes": "choice", "hyperbaton": "choice", "logical_deduction_five_objects": "choice",
    "logical_deduction_seven_objects": "choice", "logical_deduction_three_objects": "choice",
    "movie_recommendation": "choice", "multistep_arithmetic_two": "number", "navigate": "label",
    "object_counting": "number", "penguins_in_a_table": "choice", "reasoning_about_colored_objects": "choice",
    "ruin_names": "choice", "salient_translation_error_detection": "choice", "snarks": "choice",
    "sports_understanding": "label", "temporal_sequences": "choice",
    "tracking_shuffled_objects_five_objects": "choice", "tracking_shuffled_objects_seven_objects": "choice",
    "tracking_shuffled_objects_three_objects": "choice", "web_of_lies": "label", "word_sorting": "words",
}

_ANSWER_IS = re.compile(r"answer is", re.IGNORECASE)
_REST_OF_LINE = re.compile(r"[:\s]*(.*)")
_OPTION = re.compile(r"\(([A-R])\)")
_BARE_LETTER = re.compile(r"^([A-R])[).:]?$")


def _form(task: str) -> str:
    if task not in TASK_FORMS:
        raise ValueError(f"BBH: unknown task {task!r}; known: {sorted(TASK_FORMS)}")
    return TASK_FORMS[task]


def extract_answer(response: str) -> str | None:
    """The rest of the line after the last "answer is" (the prompts' "So the answer is X."),
    without surrounding space and a final period; None when the response states no answer."""
    ends = [m.end() for m in _ANSWER_IS.finditer(response)]
    if not ends:
        return None
    span = _REST_OF_LINE.match(response, ends[-1]).group(1).strip()
    return span[:-1].rstrip() if span.endswith(".") else span


def normalise(task: str, answer: str) -> str:
    """The comparable form of an answer (a target or an extracted span) of `task`: options as
    "(X)" (also from a bare "X"); labels in lower case; integers without a thousands comma;
    words split on spaces or commas and joined by one space; brackets without any spaces."""
    form = _form(task)
    answer = answer.strip()
    if form == "choice":
        m = _OPTION.search(answer) or _BARE_LETTER.match(answer)
        return f"({m.group(1)})" if m else answer
    if form == "label":
        return answer.lower()
    if form == "number":
        return answer.replace(",", "")
    if form == "words":
        return " ".join(w for w in re.split(r"[\s,]+", answer) if w)
    return re.sub(r"\s+", "", answer)


def score(task: str, response: str, target: str) -> tuple[str | None, bool]:
    """(extracted answer, correct): the normalised extracted answer equals the normalised target."""
    pred = extract_answer(response)
    return pred, pred is not None and normalise(task, pred) == normalise(task, target)


def process(rows: list[dict], name: str, task: str, where: str) -> pd.DataFrame:
    """Items of one task's rows: the domain is the task, ids "<task>-<row>"; choice tasks' targets
    must be an option "(X)"."""
    form = _form(task)
    require_fields(rows, {"input": str, "target": str}, where)
    items = []
    for i, r in enumerate(rows):
        target = str(r["target"]).strip()
        if form == "choice" and not _OPTION.fullmatch(target):
            raise ItemError(f"{where}: row {i}: target {target!r} of the multiple-choice task {task} is not '(X)'")
        items.append(make_item(f"{task}-{i}", name, task, r["input"], None, target, [target], "test"))
    return frame(items)


def load(name: str, spec: dict) -> pd.DataFrame:
    """The test rows of the task `spec["config_name"]` (hub config or local copy)."""
    rows, where = read_rows(name, spec, "test")
    return process(rows, name, spec["config_name"], where)
