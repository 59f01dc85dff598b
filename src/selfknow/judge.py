"""Judging (SPEC §0.3): is a parsed answer correct against the reference?

Three judges: normalised exact match with aliases (short answers, TriviaQA-style),
option-letter match (MCQ), and an LLM judge (a prompted model with a fixed grading template).
"""
from __future__ import annotations

import re
import string
from typing import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalise_answer(text: str | None) -> str:
    """SQuAD/TriviaQA normalisation: lower-case, drop punctuation and articles, fold spaces.
    A missing answer (None or pandas' NaN) normalises to ""."""
    if not isinstance(text, str):
        return ""
    s = str(text).lower().translate(_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str | None, aliases: Iterable[str]) -> bool:
    """True when the normalised prediction equals any normalised alias (empty never matches)."""
    pred = normalise_answer(prediction)
    return bool(pred) and any(pred == normalise_answer(a) for a in aliases)


_LETTER = re.compile(r"^\s*\(?([A-Z])\b")
_LETTER_ANYWHERE = re.compile(r"\b(?:answer|option)\s*(?:is|:)?\s*\(?([A-Z])\b", re.IGNORECASE)


def parse_option_letter(text: str | None, n_choices: int) -> str | None:
    """The option letter a free-text MCQ answer commits to, or None (unparsed).

    A leading letter ("B", "(B)", "B. ...") wins; otherwise the last "answer is X" phrase.
    """
    if not text:
        return None
    valid = string.ascii_uppercase[:n_choices]
    m = _LETTER.match(text)
    if m and m.group(1) in valid:
        return m.group(1)
    hits = [h for h in _LETTER_ANYWHERE.findall(text) if h.upper() in valid]
    return hits[-1].upper() if hits else None


def letter_match(prediction: str | None, reference: str) -> bool:
    """Option-letter match; a missing prediction (None or pandas' NaN) never matches."""
    return isinstance(prediction, str) and prediction.strip().upper() == reference.strip().upper()


def judge_many(predictions: Sequence[str | None], aliases: Sequence[Sequence[str]]) -> list[bool]:
    if len(predictions) != len(aliases):
        raise ValueError(f"{len(predictions)} predictions but {len(aliases)} alias lists")
    return [exact_match(p, a) for p, a in zip(predictions, aliases)]


# ---- the LLM judge (persistent §A.5): a prompted grader with a fixed template ----------------

JUDGE_TEMPLATE = (
    "You are grading an answer to a trivia question.\n"
    "Question: {question}\n"
    "Gold answers: {references}\n"
    "Predicted answer: {answer}\n\n"
    "Is the predicted answer correct, i.e. does it refer to the same thing as one of the gold "
    "answers? Reply with one word, CORRECT or INCORRECT."
)
_GRADE = re.compile(r"\b(INCORRECT|CORRECT|WRONG|RIGHT|YES|NO)\b", re.IGNORECASE)
_GRADE_VALUE = {"correct": True, "right": True, "yes": True, "incorrect": False, "wrong": False, "no": False}


def judge_prompt(question: str, references: Sequence[str], answer: str | None) -> str:
    return JUDGE_TEMPLATE.format(question=question, references="; ".join(references), answer=answer or "(no answer)")


def parse_grade(text: str | None) -> bool | None:
    """The judge's last grade word (CORRECT/INCORRECT and synonyms); None when it gave none."""
    hits = _GRADE.findall(text or "")
    return _GRADE_VALUE[hits[-1].lower()] if hits else None


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's kappa of two binary raters; NaN when chance agreement is 1 (one constant label)."""
    x = [bool(v) for v in a]
    y = [bool(v) for v in b]
    if len(x) != len(y) or not x:
        raise ValueError("cohen_kappa needs two non-empty label lists of one length")
    n = len(x)
    po = sum(u == v for u, v in zip(x, y)) / n
    px, py = sum(x) / n, sum(y) / n
    pe = px * py + (1 - px) * (1 - py)
    return float("nan") if pe == 1 else (po - pe) / (1 - pe)
