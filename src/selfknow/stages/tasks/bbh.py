"""BIG-Bench Hard (suzgun/BIG-Bench-Hard, hub copy lukaemon/bbh, one config per task; LADDER
§E.1 Table 15), scored as lm-eval's BBH chain-of-thought task scores it (EleutherAI/
lm-evaluation-harness, lm_eval/tasks/bbh/cot_fewshot/_cot_fewshot_template_yaml at commits
04a3357 and 4785623, and lm_eval/filters/extraction.py `RegexFilter`, read 2026-12-01): the
filter "get-answer" takes the first match of the regex `(?<=the answer is )(.*)(?=.)`
(case-sensitive; the rest of that line but its last character), stripped, or "[invalid]"
when there is none (here: None, unparsed); the metric `exact_match` compares it with the
target as strings (ignore_case and ignore_punctuation are commented out there).

`lenient` (config `ladder.cross_task.bbh_lenient`, off by default: a deviation) is the
normaliser this package used before: the last "answer is" in any case, and each task's answer
form normalised (`normalise`).

Hub row schema: input, target. A local copy (`path`) holds one task's rows, named by
`config_name` as on the hub.
"""
from __future__ import annotations

import re

import pandas as pd

from selfknow.stages.datasets.source import ItemError, at, frame, make_item, read_rows, require_fields

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

_OFFICIAL_ANSWER = re.compile(r"(?<=the answer is )(.*)(?=.)")
_ANSWER_IS = re.compile(r"answer is", re.IGNORECASE)
_REST_OF_LINE = re.compile(r"[:\s]*(.*)")
_OPTION = re.compile(r"\(([A-R])\)")
_BARE_LETTER = re.compile(r"^([A-R])[).:]?$")


def _form(task: str) -> str:
    if task not in TASK_FORMS:
        raise ValueError(f"BBH: unknown task {task!r}; known: {sorted(TASK_FORMS)}")
    return TASK_FORMS[task]


def extract_answer(response: str, lenient: bool) -> str | None:
    """lm-eval's answer (see the module docstring); lenient: the rest of the line after the last
    "answer is", without surrounding space and a final period. None when there is none."""
    if not lenient:
        found = _OFFICIAL_ANSWER.findall(response)
        return found[0].strip() if found else None
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


def matches(task: str, answer: str, target: str, lenient: bool) -> bool:
    """lm-eval's exact match of an extracted answer; lenient: of both normalised forms."""
    _form(task)
    return normalise(task, answer) == normalise(task, target) if lenient else answer == target


def score(task: str, response: str, target: str, lenient: bool) -> tuple[str | None, bool]:
    """(extracted answer, correct)."""
    pred = extract_answer(response, lenient)
    return pred, pred is not None and matches(task, pred, target, lenient)


def process(rows: list[dict], name: str, task: str, where: str) -> pd.DataFrame:
    """Items of one task's rows: the domain is the task, ids "<task>-<row>"; choice tasks' targets
    must be an option "(X)"."""
    form = _form(task)
    require_fields(rows, {"input": str, "target": str}, where)
    items = []
    for i, r in enumerate(rows):
        target = str(r["target"]).strip()
        if form == "choice" and not _OPTION.fullmatch(target):
            raise ItemError(f"{at(where, i)}: target {target!r} of the multiple-choice task {task} is not '(X)'")
        items.append(make_item(f"{task}-{i}", name, task, r["input"], None, target, [target], "test"))
    return frame(items)


def load(name: str, spec: dict) -> pd.DataFrame:
    """The test rows of the task `spec["config_name"]` (hub config or local copy)."""
    rows, where = read_rows(name, spec, "test")
    return process(rows, name, spec["config_name"], where)
