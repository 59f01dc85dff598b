"""Judging (SPEC §0.3): is a parsed answer correct against the reference?

Three judges: normalised exact match with aliases (short answers, TriviaQA-style),
option-letter match (MCQ), and an LLM judge (persistent §A.5: the authors' R/W/N prompt over
every candidate answer of a question).
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

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


# An option letter is an upper-case letter standing alone: "Answer: J", "(C)", "B." or "B) ...",
# never the first letter of a word or sentence ("I am not sure.", "A 62-year-old man ...") nor a
# lower-case article ("the answer is a drug ..."); with ten options A-J, I and A are options.
_ALONE = r"(?=\s*$|[.,;:!)\]*]|\s+[-\u2013\u2014(])"
_BARE = re.compile(r"^\s*[*(\[]*\s*([A-Z])\s*[)\]*]*\.?\s*$")
_LEADING = re.compile(r"^\s*[*(\[]*([A-Z])(?:[.):\]]|\*\*)")
_FINAL = re.compile(r"(?i:\banswer)(?:\s*(?i:is))?\s*\**\s*[:=]?\s*\**\s*[(\[]?\s*([A-Z])" + _ALONE,
                    re.MULTILINE)


def final_answer_letter(text: str | None, n_choices: int) -> str | None:
    """The option letter of an explicit final-answer form, or None: the last "Answer: X" /
    "answer is X" / "final answer is: (X)" (the keyword in any case, X an upper-case option
    letter standing alone), else a reply that is nothing but the letter ("B", "(B)", "B.").
    Nothing else counts: no leading letter of a sentence, no lower-case letter."""
    if not text:
        return None
    valid = string.ascii_uppercase[:n_choices]
    hits = [h for h in _FINAL.findall(text) if h in valid]
    if hits:
        return hits[-1]
    m = _BARE.match(text)
    return m.group(1) if m and m.group(1) in valid else None


def parse_option_letter(text: str | None, n_choices: int) -> str | None:
    """The option letter a free-text MCQ answer ("the letter of the correct option only")
    commits to, or None (unparsed): an explicit final-answer form (`final_answer_letter`),
    else a leading option label ("B. Paris", "(C) because ...", "**D**")."""
    found = final_answer_letter(text, n_choices)
    if found or not text:
        return found
    m = _LEADING.match(text)
    return m.group(1) if m and m.group(1) in string.ascii_uppercase[:n_choices] else None


def letter_match(prediction: str | None, reference: str) -> bool:
    """Option-letter match; a missing prediction (None or pandas' NaN) never matches."""
    return isinstance(prediction, str) and prediction.strip().upper() == reference.strip().upper()


# ---- the LLM judge (persistent §3.1, §A.5) ------------------------------------------------
# The authors' request shape: one request per question listing every candidate answer,
# numbered; the judge answers one line "k. X" per candidate, X = R (right), W (wrong) or N (no
# attempt, counted as wrong). A question with several reference answers gets the "ANY of the
# ground-truth answers" variant.

LABELS = ("R", "W", "N")
#: label modes: free generation parsed line by line (the authors' way), or one label token per
#: candidate chosen from the R/W/N log-probabilities (hf judges only)
LABEL_MODES = ("generate", "constrained")

_TASK = ("Please determine whether each candidate answer attempts the question (rather than "
         "abstaining or not including a well-formed answer), and if so, determine whether the "
         "candidate answer is semantically consistent with {target} in the context of the "
         "question. For each candidate answer, output a line with the answer number followed by "
         "a period and a space and exactly one more character: \"R\" for correct, \"W\" for "
         "incorrect, or \"N\" for no attempt.")
_LABEL_LINE = re.compile(r"^\s*(\d+)\s*[.):]?\s*([RWN])\s*\.?\s*$", re.MULTILINE)
_REFUSAL = re.compile(r"\b(sorry|cannot|can't|can not|unable to|won't|refuse)\b", re.IGNORECASE)


def candidates_prompt(question: str, references: Sequence[str], candidates: Sequence[str]) -> str:
    """The judge request for one question (persistent §A.5): every candidate numbered from 1;
    one reference -> the standard prompt, several -> the multi-reference prompt, which lists
    them as a Python list as the authors' code does."""
    if not candidates:
        raise ValueError(f"question {question!r}: no candidate answers to judge")
    if not references:
        raise ValueError(f"question {question!r}: no reference answer to judge against")
    n = len(candidates)
    what = f"{n} candidate answer{'s' if n > 1 else ''}"
    if len(references) == 1:
        head = (f"Below is a question along with the ground-truth answer and {what}. "
                + _TASK.format(target="the ground-truth answer"))
        ref = f"Ground-truth answer: {references[0]}"
    else:
        head = (f"Below is a question along with a list of reference ground-truth answers and {what}. "
                + _TASK.format(target="ANY of the ground-truth answers"))
        ref = f"Reference ground-truth answers: {list(references)}"
    listed = "\n".join(f"{k}. {c}" for k, c in enumerate(candidates, 1))
    return f"{head}\n\nQuestion: {question}\n{ref}\nCandidate answers:\n{listed}"


def judge_references(answer: str, aliases: Sequence[str], *, multi_reference: bool) -> list[str]:
    """What the judge compares against: the reference answer (TriviaQA, Jeopardy: the authors
    show `answer.value` only, not its aliases), or with `multi_reference` every distinct
    accepted answer (BioASQ)."""
    return list(dict.fromkeys(aliases)) if multi_reference else [answer]


def parse_labels(text: str | None, n: int) -> list[str | None]:
    """The R/W/N label of candidates 1..n from lines "k. X"; None where line k is missing or
    its label is not one of R/W/N."""
    found: dict[int, str] = {}
    for m in _LABEL_LINE.finditer(text or ""):
        found.setdefault(int(m.group(1)), m.group(2))
    return [found.get(k) for k in range(1, n + 1)]


@dataclass(frozen=True)
class Judgment:
    """The judge's verdict on one question's candidates. `status`: "ok" (every candidate
    labelled), "refused" (no label at all and a refusal: a content filter or a declining
    reply), "unparsable" (some label missing or malformed). A missing label counts as wrong,
    as the authors' retrieval defaults it to N."""

    labels: tuple[str | None, ...]
    status: str
    reply: str

    @property
    def correct(self) -> list[bool]:
        return [lab == "R" for lab in self.labels]


def _verdict(text: str, n: int, finish_reason: str) -> Judgment:
    labels = parse_labels(text, n)
    if all(lab is not None for lab in labels):
        status = "ok"
    elif all(lab is None for lab in labels) and (finish_reason == "content_filter" or _REFUSAL.search(text)):
        status = "refused"
    else:
        status = "unparsable"
    return Judgment(tuple(labels), status, text)


def max_judge_tokens(n: int) -> int:
    """The authors' output budget for n candidates: "k. X" lines plus 3 special tokens, at least 16."""
    return max(4 * n - 1 + 3, 16)


def judge_candidates(lm, questions: Sequence[str], references: Sequence[Sequence[str]],
                     candidates: Sequence[Sequence[str]], *, chat: bool, labels: str) -> list[Judgment]:
    """One judgment per question (see `candidates_prompt`). `labels` "generate": the judge
    writes its answer (temperature 0) and it is parsed; "constrained": after the judge's
    continuation "k." the most likely next token of " R", " W", " N" is candidate k's label,
    appended before "k+1.", so every candidate gets exactly one label token. Constrained
    labels need a backend that renders its own prompt (`render`, hf) and a judge loaded
    without chat wrapping (`selfknow.stages.jobs.load_judge`): the assistant turn is continued, not
    restarted."""
    if not len(questions) == len(references) == len(candidates):
        raise ValueError(f"{len(questions)} questions, {len(references)} reference lists and "
                         f"{len(candidates)} candidate lists")
    prompts = [candidates_prompt(q, r, c) for q, r, c in zip(questions, references, candidates)]
    if labels == "generate":
        out: list[Judgment | None] = [None] * len(prompts)
        # one generation call per candidate count: the budget depends on it, and a question's
        # request (so its cache key) must not depend on which questions share its batch; the
        # calls go together (a batched API judge: one set of batch jobs, not one per count)
        groups = {n: [i for i, c in enumerate(candidates) if len(c) == n] for n in sorted({len(c) for c in candidates})}

        def call(n: int, idx: list[int]):
            return lambda: lm.generate([prompts[i] for i in idx], max_new_tokens=lm.budget("judge", max_judge_tokens(n)),
                                       chat=chat)

        for (n, idx), replies in zip(groups.items(), lm.together([call(n, idx) for n, idx in groups.items()])):
            for i, r in zip(idx, replies):
                out[i] = _verdict(r.text, n, r.finish_reason)
        return out  # type: ignore[return-value]
    if labels == "constrained":
        return _constrained(lm, prompts, [len(c) for c in candidates], chat=chat)
    raise ValueError(f"judge labels must be one of {LABEL_MODES}, got {labels!r}")


def _constrained(lm, prompts: Sequence[str], sizes: Sequence[int], *, chat: bool) -> list[Judgment]:
    if not hasattr(lm, "render"):
        raise ValueError(f"judge model {lm.model_id!r}: constrained labels need a backend that renders "
                         f"its own prompt and scores the next token after it (hf); use labels: generate")
    heads = [lm.render(p, chat=chat) for p in prompts]
    written = [""] * len(prompts)
    chosen: list[list[str]] = [[] for _ in prompts]
    for k in range(1, max(sizes, default=0) + 1):
        active = [i for i, n in enumerate(sizes) if n >= k]
        for i in active:
            written[i] += f"{k}."
        scores = lm.next_token_logprobs([heads[i] + written[i] for i in active], [f" {lab}" for lab in LABELS],
                                        chat=False)
        for r, i in enumerate(active):
            best = LABELS[int(np.argmax(scores[r]))]
            chosen[i].append(best)
            written[i] += f" {best}" + ("\n" if k < sizes[i] else "")
    return [Judgment(tuple(c), "ok", w) for c, w in zip(chosen, written)]


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


def kappa_interval(a: Sequence[bool], b: Sequence[bool], *, replicates: int, seed: int,
                   level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of Cohen's kappa over items resampled with replacement;
    replicates where one rater is constant (kappa undefined) are left out. (NaN, NaN) when
    none is defined."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1 or not len(x):
        raise ValueError("kappa_interval needs two non-empty label lists of one length")
    idx = np.random.default_rng(seed).integers(0, len(x), size=(replicates, len(x)))
    xs, ys = x[idx], y[idx]
    po = (xs == ys).mean(axis=1)
    px, py = xs.mean(axis=1), ys.mean(axis=1)
    pe = px * py + (1 - px) * (1 - py)
    ok = pe < 1
    if not ok.any():
        return float("nan"), float("nan")
    k = (po[ok] - pe[ok]) / (1 - pe[ok])
    tail = 100 * (1 - level) / 2
    return float(np.percentile(k, tail)), float(np.percentile(k, 100 - tail))
