"""How the answering model produces (answer, confidence) for one LADDER turn (paper §3, §B.1).

The answering model sees ONLY the current question (no history, no feedback). Mechanisms:

* base LMs (the offline default's small GPT-2-style models): cloze scoring of the options'
  text after the question (`selfknow.stages.mcq`); answer = the most likely option, confidence = its
  probability renormalised over the options (`answer_by_cloze`).
* instruct / API models, `ladder.answer_format`:
  - "authors": the authors' session prompt (prompts/answer_mcq_authors.txt, "Answer: X /
    Confidence: 0-100") read by their parser (`parse_authors_reply`);
  - "json": our prompted JSON reply {"answer": "B", "confidence": 0.8}, parsed robustly
    (`parse_answer_reply`).
  A reply with no recoverable option letter gets answer None (scored wrong downstream, as the
  authors' parser does) and is counted in `answer_status`, never dropped.
* a failed answer call (`ladder.failed_answer_call`): "fail" fails the job after the backend's
  retries; "authors" does what the authors' runner does (`call_api` in
  yin1245/selfbound code/baselines/capbound_session_api.py: one try with a 30 s timeout, the
  text "[ERROR: ...]" returned as the reply and parsed as any reply, so answer None and
  confidence 0.5), with `answer_status` "error" on those records.

Also home of the prompt-file loader and the tolerant JSON/number parsing that the prompted
levels (`prompted.py`) share.
"""
from __future__ import annotations

import json
import math
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from selfknow.stages.mcq import chosen_letter, option_probabilities
from selfknow.models.base import LM
from selfknow.models.http_retry import RequestFailed

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
LETTERS = "ABCDEFGHIJ"
#: Confidence recorded when a reply states no usable confidence (the authors' runner uses 0.5).
DEFAULT_CONFIDENCE = 0.5
ANSWER_COLUMNS = ["item_id", "answer", "confidence", "answer_status", "answer_raw"]
#: `ladder.failed_answer_call` values (module docstring)
FAILED_CALL_POLICIES = ("fail", "authors")
#: the authors' runner's request timeout (`call_api`: `requests.post(..., timeout=30)`)
AUTHORS_TIMEOUT_S = 30.0


# ----------------------------------------------------------------------------- prompt files
@lru_cache(maxsize=None)
def load_prompt(name: str) -> string.Template:
    """`prompts/<name>.txt` as a `string.Template` ($field placeholders, so JSON braces in the
    text need no escaping). Trailing newlines are stripped: a prompt must end exactly where the
    model continues (e.g. after "Answer:")."""
    path = PROMPT_DIR / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {path} does not exist")
    return string.Template(path.read_text(encoding="utf-8").rstrip("\n"))


@lru_cache(maxsize=None)
def load_sections(name: str) -> dict[str, tuple[str, ...]]:
    """A sectioned prompt file: lines `### key` open a section, `#` lines are comments, every
    other non-empty line is one entry of the current section."""
    path = PROMPT_DIR / f"{name}.txt"
    sections: dict[str, list[str]] = {}
    current = None
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("###"):
            current = line[3:].strip()
            sections.setdefault(current, [])
        elif not line.strip() or line.startswith("#"):
            continue
        elif current is None:
            raise ValueError(f"{path}:{lineno}: text before the first '### section' line")
        else:
            sections[current].append(line.strip())
    return {k: tuple(v) for k, v in sections.items()}


def format_choices(choices: Sequence[str]) -> str:
    """'A. first\\nB. second ...' (the authors' choice format)."""
    return "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))


# ----------------------------------------------------------------------------- parsing
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


def parse_probability(value: object) -> float | None:
    """A probability from a number, "0.7", "70%", "70" or 70: values above 1 (or with a % sign)
    are read as percentages. Not clipped (callers clip); None when nothing numeric is there."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, np.number)):
        x, pct = float(value), False
    elif isinstance(value, str):
        m = re.search(rf"({_NUM})\s*(%?)", value)
        if not m:
            return None
        x, pct = float(m.group(1)), bool(m.group(2))
    else:
        return None
    if not math.isfinite(x):
        return None
    return x / 100.0 if (pct or x > 1.0) else x


def _brace_blocks(text: str) -> Iterator[str]:
    """Balanced {...} blocks in order of their opening brace (quoted braces are skipped)."""
    start = text.find("{")
    while start != -1:
        depth, in_str, esc = 0, None, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == in_str:
                    in_str = None
            elif ch in "\"'":
                in_str = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    yield text[start:i + 1]
                    break
        start = text.find("{", start + 1)


def _repair_json(block: str) -> str:
    """Common small-model JSON slips: single quotes, trailing commas, bare keys, 70% values."""
    s = block.strip()
    if "'" in s and '"' not in s:
        s = s.replace("'", '"')
    s = re.sub(r",\s*([}\]])", r"\1", s)
    s = re.sub(r'([{,]\s*)([A-Za-z_][\w \-]*?)\s*:', lambda m: f'{m.group(1)}"{m.group(2)}":', s)
    s = re.sub(rf"(:\s*)({_NUM})\s*%", lambda m: f'{m.group(1)}"{m.group(2)}%"', s)
    return s


def iter_json_objects(text: str | None) -> Iterator[dict]:
    """Every JSON object recoverable from a model reply, in order: tolerant of prose around
    it, ```json fences, single quotes, trailing commas, unquoted keys and percent signs."""
    if not text:
        return
    for block in _brace_blocks(text):
        for candidate in (block, _repair_json(block)):
            try:
                obj = json.loads(candidate)
            except (json.JSONDecodeError, ValueError):
                continue
            if isinstance(obj, dict):
                yield obj
                break


def extract_json_object(text: str | None) -> dict | None:
    """The first JSON object in a model reply (see `iter_json_objects`), or None."""
    return next(iter_json_objects(text), None)


@dataclass(frozen=True)
class ParsedAnswer:
    answer: str | None
    confidence: float
    status: str  # "ok" | "no_confidence" | "unparsed"


def parse_answer_reply(text: str | None, n_options: int = 4) -> ParsedAnswer:
    """(answer letter, confidence) from an instruct model's reply.

    Order: the JSON object ({"answer": ..., "confidence": ...}); else "Answer: X" /
    "Confidence: N" lines (the authors' format); else a lone option letter. Confidence
    missing -> DEFAULT_CONFIDENCE with status "no_confidence"; no letter -> answer None,
    status "unparsed" (kept and scored wrong)."""
    letters = LETTERS[:n_options]
    text = text or ""
    answer = conf = None
    for obj in iter_json_objects(text):
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        a = lowered.get("answer", lowered.get("choice", lowered.get("option")))
        if not isinstance(a, str) and "confidence" not in lowered:
            continue
        if isinstance(a, str):
            m = re.match(rf"\s*\(?([{letters}])\b", a.strip().upper())
            answer = m.group(1) if m else None
        conf = parse_probability(lowered.get("confidence", lowered.get("probability")))
        break
    if answer is None:
        # option letters are upper case only: "answer a question" must not read as "A"
        m = re.search(rf"(?i:answer)(?:\s*(?i:is|would be|should be))?\W{{0,3}}\s*\(?"
                      rf"([{letters}])\b", text)
        answer = m.group(1) if m else None
    if answer is None:
        m = re.fullmatch(rf"\s*\(?([{letters}])[).:]?\s*", text)
        answer = m.group(1) if m else None
    if conf is None:
        m = re.search(rf"confidence\W{{0,3}}\s*({_NUM}\s*%?)", text, re.IGNORECASE)
        conf = parse_probability(m.group(1)) if m else None
    if conf is not None:
        conf = float(np.clip(conf, 0.0, 1.0))
    if answer is None:
        return ParsedAnswer(None, DEFAULT_CONFIDENCE if conf is None else conf, "unparsed")
    if conf is None:
        return ParsedAnswer(answer, DEFAULT_CONFIDENCE, "no_confidence")
    return ParsedAnswer(answer, conf, "ok")


_AUTHORS_ANSWER = r"Answer:\s*([{letters}])"
_AUTHORS_CONFIDENCE = re.compile(r"Confidence:\s*(\d+)")


def parse_authors_reply(text: str | None, n_options: int = 4) -> ParsedAnswer:
    """(answer letter, confidence) as the authors' session runner reads a reply
    (yin1245/selfbound code/baselines/capbound_session_api.py, `no_memory_agent`): the first
    case-sensitive "Answer:" followed by an option letter, and the first "Confidence:" followed
    by digits, read as a whole percentage; no confidence -> DEFAULT_CONFIDENCE. So
    "**Answer:** B" has no answer and "Confidence: 0.85" reads 0, as theirs. Percentages above
    100 are clipped to 1 (none of the released records exceeds 1)."""
    text = text or ""
    m = re.search(_AUTHORS_ANSWER.format(letters=LETTERS[:n_options]), text)
    answer = m.group(1) if m else None
    mc = _AUTHORS_CONFIDENCE.search(text)
    conf = min(int(mc.group(1)) / 100.0, 1.0) if mc else None
    if answer is None:
        return ParsedAnswer(None, DEFAULT_CONFIDENCE if conf is None else conf, "unparsed")
    if conf is None:
        return ParsedAnswer(answer, DEFAULT_CONFIDENCE, "no_confidence")
    return ParsedAnswer(answer, conf, "ok")


#: `ladder.answer_format` -> (prompt file, reply parser)
ANSWER_FORMATS = {"authors": ("answer_mcq_authors", parse_authors_reply),
                  "json": ("answer_mcq_json", parse_answer_reply)}


# ----------------------------------------------------------------------------- answering
def _choices(row) -> list[str]:
    ch = row["choices"]
    if ch is None or (isinstance(ch, float) and math.isnan(ch)):
        raise ValueError(f"item {row['item_id']!r} has no choices: LADDER turns are MCQ")
    return [str(c) for c in list(ch)]


def answer_by_cloze(lm: LM, items: pd.DataFrame, sample_index: int = 0,
                    batch_size: int = 32) -> pd.DataFrame:
    """Answer each MCQ item by cloze scoring of its options (`selfknow.stages.mcq`): answer = the
    most likely option's letter, confidence = its probability renormalised over the options.
    Returns ANSWER_COLUMNS, one row per item in input order; `answer_raw` holds the option
    probabilities by letter as JSON. Log-probabilities do not vary, so `sample_index` is
    ignored."""
    recs = items.to_dict("records")
    out = []
    for s in range(0, len(recs), batch_size):
        chunk = recs[s:s + batch_size]
        probs = option_probabilities(lm, [str(r["question"]) for r in chunk], [_choices(r) for r in chunk])
        for r, p in zip(chunk, probs):
            out.append({"item_id": r["item_id"], "answer": chosen_letter(p), "confidence": float(p.max()),
                        "answer_status": "ok",
                        "answer_raw": json.dumps({LETTERS[c]: round(float(p[c]), 6) for c in range(len(p))})})
    return pd.DataFrame(out, columns=ANSWER_COLUMNS)


def answer_by_prompt(lm: LM, items: pd.DataFrame, sample_index: int = 0, *,
                     answer_format: str = "json", max_new_tokens: int = 64,
                     temperature: float = 0.0, chat: bool = True,
                     batch_size: int = 16, failed_call: str = "fail") -> pd.DataFrame:
    """Answer each MCQ item with the prompt and parser of `answer_format` (ANSWER_FORMATS).
    `sample_index` tells draws apart where the answer may vary (temperature > 0 or a hosted
    API): a fresh call per session turn passes the session's index. The model entry's
    `token_budgets.ladder_answer` overrides `max_new_tokens`. Unparsable replies keep answer
    None and status "unparsed" (counted, scored wrong). A call that fails after the backend's
    retries fails the job, or with `failed_call="authors"` is recorded as the authors' runner
    records it (module docstring), status "error"."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"unknown ladder.answer_format {answer_format!r}; known: {sorted(ANSWER_FORMATS)}")
    name, parse = ANSWER_FORMATS[answer_format]
    tmpl = load_prompt(name)
    recs = items.to_dict("records")
    prompts = [tmpl.substitute(question=r["question"], choices=format_choices(_choices(r)))
               for r in recs]
    if failed_call not in FAILED_CALL_POLICIES:
        raise ValueError(f"unknown ladder.failed_answer_call {failed_call!r}; known: {list(FAILED_CALL_POLICIES)}")

    def ask(batch: list[str]) -> list[str]:
        return [g.text for g in lm.generate(batch, max_new_tokens=lm.budget("ladder_answer", max_new_tokens),
                                            chat=chat, temperature=temperature, sample_index=sample_index)]

    texts: list[str] = []
    failed: list[bool] = []
    for s in range(0, len(prompts), batch_size):
        batch = prompts[s:s + batch_size]
        try:
            texts += ask(batch)
            failed += [False] * len(batch)
        except RequestFailed:
            if failed_call == "fail":
                raise
            for p in batch:  # the batch's answered prompts come back from the call cache
                try:
                    texts += ask([p])
                    failed.append(False)
                except RequestFailed as err:
                    texts.append(f"[ERROR: {err}]")
                    failed.append(True)
    out = []
    for r, t, err in zip(recs, texts, failed):
        pa = parse(t, len(_choices(r)))
        out.append({"item_id": r["item_id"], "answer": pa.answer, "confidence": pa.confidence,
                    "answer_status": "error" if err else pa.status, "answer_raw": t})
    return pd.DataFrame(out, columns=ANSWER_COLUMNS)


#: (items, sample_index) -> ANSWER_COLUMNS frame
AnswerFn = Callable[..., pd.DataFrame]


def make_answer_fn(lm: LM, mode: str = "cloze", **kwargs) -> AnswerFn:
    """(items, sample_index=0) -> ANSWER_COLUMNS frame. mode "cloze" (base LMs) or a prompted
    `ladder.answer_format` ("authors", "json"; kwargs go to `answer_by_prompt`)."""
    if mode == "cloze":
        return lambda items, sample_index=0: answer_by_cloze(lm, items, sample_index, **kwargs)
    if mode in ANSWER_FORMATS:
        return lambda items, sample_index=0: answer_by_prompt(lm, items, sample_index,
                                                              answer_format=mode, **kwargs)
    raise ValueError(f"unknown answer mode {mode!r}: expected 'cloze' or one of {sorted(ANSWER_FORMATS)}")
