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
    """SQuAD/TriviaQA normalisation: lower-case, drop punctuation and articles, fold spaces."""
    if text is None:
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
    return prediction is not None and prediction.strip().upper() == reference.strip().upper()


def judge_many(predictions: Sequence[str | None], aliases: Sequence[Sequence[str]]) -> list[bool]:
    if len(predictions) != len(aliases):
        raise ValueError(f"{len(predictions)} predictions but {len(aliases)} alias lists")
    return [exact_match(p, a) for p, a in zip(predictions, aliases)]
