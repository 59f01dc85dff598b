"""Local stand-ins for the paper's datasets, in each source's own row schema, generated
deterministically and sized from the dataset's config entry so that the loaders' filters and
ranges are met.

Each fixture also carries the cases the authors' processing removes (duplicates, blacklisted
or malformed questions, HTML-linked clues, excluded or too-small Jeopardy categories, long
BioASQ lists, non-factoid/list types, MMLU rows outside the released positions), so the
rehearsal runs every filter. The rows are placed so that the loader's own shuffle (numpy's
permutation for the hub datasets, `random.Random` for BioASQ) puts them in a planned order:
the in-context head is clean and the filtered rows fall inside the evaluation ranges.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from selfknow.stages.datasets.jeopardy import PAPER_CATEGORIES
from selfknow.stages.datasets.source import hf_shuffle_order
from selfknow.stages.datasets.triviaqa import BLACKLIST
from selfknow.stages.tasks.bbh import TASK_FORMS
from selfknow.records import write_text
from selfknow.stages.tasks import analogues
from selfknow.stages.tasks.bfcl import files as bfcl_files

#: rows of each extension-task stand-in (at least the rehearsal's `ladder.extension.*.n_items`)
EXTENSION_ROWS = 8
_SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "vos", "dar", "el", "qui", "sor", "na", "bel",
              "tor", "ix", "fen", "ul", "gra", "mon", "pe", "zal")
_TEMPLATES = ("Which city is the capital of {w}?", "Who wrote the book {w}?",
              "What river runs through {w}?", "In which year was {w} founded?",
              "What is the name of the mountain near {w}?", "Which instrument did {w} play?")


class Words:
    """Invented words from a seeded generator: the fixtures' questions and answers."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.asked: set[str] = set()

    def word(self) -> str:
        n = int(self.rng.integers(2, 4))
        return "".join(self.rng.choice(_SYLLABLES, size=n)).capitalize()

    def phrase(self, k: int) -> str:
        return " ".join(self.word() for _ in range(k))

    def options(self, k: int, n_words: int) -> list[str]:
        """k distinct phrases (answer options must differ)."""
        out: list[str] = []
        while len(out) < k:
            p = self.phrase(n_words)
            if p not in out:
                out.append(p)
        return out

    def question(self) -> str:
        """A question not asked before by this generator (the loaders deduplicate)."""
        while True:
            q = str(self.rng.choice(_TEMPLATES)).format(w=self.phrase(2))
            if q not in self.asked:
                self.asked.add(q)
                return q


def _place(logical: list, order) -> list:
    """Rows such that `[rows[i] for i in order]` is `logical`."""
    rows: list = [None] * len(logical)
    for k, i in enumerate(order):
        rows[i] = logical[k]
    return rows


def _write(text: str, path: Path) -> None:
    """Write `text` atomically, leaving an identical file untouched: a rebuild of the same
    fixture must not look new to Snakemake (the fixtures are its jobs' inputs)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    write_text(text, path)


def _write_jsonl(rows: list[dict], path: Path) -> None:
    _write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), path)


def _trivia_row(qid: str, question: str, answer: str) -> dict:
    aliases = [answer, answer.lower()]
    return {"question_id": qid, "question": question, "question_source": "http://www.quizballs.com/",
            "entity_pages": {"doc_source": [], "filename": [], "title": [], "wiki_context": []},
            "search_results": {"description": [], "filename": [], "rank": [], "title": [], "url": [],
                               "search_context": []},
            "answer": {"aliases": aliases, "normalized_aliases": [a.lower() for a in aliases],
                       "matched_wiki_entity_name": "", "normalized_matched_wiki_entity_name": "",
                       "normalized_value": answer.lower(), "type": "WikipediaEntity", "value": answer}}


def triviaqa(spec: dict, out: Path, seed: int) -> None:
    """`validation.jsonl` and `train.jsonl`: the evaluation list (validation, then train after
    the reserved head) covers `test_range`, plus one duplicate per split and the authors' three
    blacklisted questions inside the evaluation ranges."""
    words = Words(seed)
    n_eval = max(spec["train_range"][1], spec["test_range"][1])
    n_val = n_eval // 2
    n_train = n_eval - n_val + spec["reserved_icl"] + len(BLACKLIST)

    def clean(prefix: str, n: int) -> list[dict]:
        return [_trivia_row(f"{prefix}_{k}", words.question(), words.phrase(1)) for k in range(n)]

    val = clean("tv", n_val)
    val.insert(n_val // 2, {**val[0], "question_id": "tv_dup", "question": f"  {val[0]['question']} "})
    train = clean("tt", n_train - len(BLACKLIST))
    head = spec["reserved_icl"]
    for k, q in enumerate(BLACKLIST):
        # evaluation positions n_val + 1 + 2k: inside the evaluation ranges, so the filter runs
        train.insert(head + 1 + 2 * k, _trivia_row(f"tt_black{k}", q, words.phrase(1)))
    train.append({**train[head], "question_id": "tt_dup"})
    for name, logical in (("validation", val), ("train", train)):
        _write_jsonl(_place(logical, hf_shuffle_order(len(logical), spec["shuffle_seed"])), out / f"{name}.jsonl")


def jeopardy(spec: dict, out: Path, seed: int) -> None:
    """`train.jsonl`: the paper's 85 categories, each with enough clues for the evaluation
    ranges; the excluded categories at the threshold; one category one clue short of it; clues
    with HTML links, duplicates and malformed clues (unquoted, "clue ... missing") after the
    reserved head."""
    words = Words(seed)
    rng = random.Random(seed)
    least = spec["min_category_count"]
    n_eval = max(spec["train_range"][1], spec["test_range"][1]) + spec["reserved_icl"]
    per_cat = max(least, math.ceil(n_eval / len(PAPER_CATEGORIES)) + 1)

    def clue(cat: str) -> dict:
        return {"category": cat.lower(), "ee-category": cat, "question": f"'{words.question()}'",
                "continuation": words.phrase(1), "air_date": "2004-12-31", "value": "$200"}

    cats = sorted(PAPER_CATEGORIES)
    body = [clue(c) for c in cats for _ in range(per_cat)]
    body += [clue(c) for c in spec["exclude_categories"] for _ in range(least)]
    body += [clue("SMALL TALK") for _ in range(least - 1)]
    rng.shuffle(body)
    head = [clue(cats[k]) for k in range(spec["reserved_icl"])]
    odd = [{**clue("SCIENCE"), "question": "'This <a href=\"http://www.j-archive.com/media/x.jpg\">star</a>'"},
           {**body[0], "question": f" {body[0]['question']}  "},
           {**clue("HISTORY"), "question": words.question()},
           {**clue("HISTORY"), "question": "'The clue for this one is missing'"}]
    for k, row in enumerate(odd):
        body.insert(1 + 3 * k, row)
    logical = head + body
    _write_jsonl(_place(logical, hf_shuffle_order(len(logical), spec["shuffle_seed"])), out / "train.jsonl")


def bioasq(spec: dict, path: Path, seed: int, n_test: int) -> None:
    """A training JSON (`{"questions": [...]}`) with factoid and list questions (the first
    `n_icl` of each type are the in-context examples, then `n_test` test questions), plus
    yes/no and summary questions, a duplicate body and list questions with too many groups."""
    words = Words(seed)
    n_icl, long = spec["n_icl"], spec["max_list_answers"] + 1

    def question(k: int, kind: str) -> dict:
        body = words.question()
        if k % 3 == 0:
            body = body.rstrip("?")  # no final punctuation: the loader appends it
        q = {"id": f"bq{k:05d}", "type": kind, "body": body, "documents": [], "snippets": []}
        if kind == "factoid":
            q["exact_answer"] = [words.phrase(1), words.phrase(2)]
        elif kind == "list":
            q["exact_answer"] = [[words.phrase(1)] for _ in range(long if k % 7 == 0 else 3)]
        elif kind == "yesno":
            q["exact_answer"] = "yes"
        return q

    kinds = ["factoid", "list"] * n_icl + ["factoid", "list", "factoid", "yesno", "summary"] * math.ceil(n_test / 2)
    logical = [question(k, kind) for k, kind in enumerate(kinds)]
    logical.insert(2 * n_icl + 1, {**logical[2 * n_icl], "id": "bq_dup"})
    order = list(range(len(logical)))
    random.Random(spec["shuffle_seed"]).shuffle(order)
    _write(json.dumps({"questions": _place(logical, order)}, indent=2, sort_keys=True) + "\n", path)


def mmlu(spec: dict, out: Path, seed: int) -> None:
    """`test.jsonl`: `subject_range[1]` rows of each configured subject (the loader keeps the
    range's positions), interleaved with a subject outside the pool."""
    words = Words(seed)
    rows = []
    for k in range(spec["subject_range"][1]):
        for subject in [*spec["subjects"], "virology"]:
            rows.append({"question": words.question(), "subject": subject,
                         "choices": words.options(4, 1), "answer": int(words.rng.integers(4))})
    _write_jsonl(rows, out / "test.jsonl")


def medxpertqa(out: Path, seed: int, n: int) -> None:
    """`test.jsonl`: `n` ten-option questions whose text ends in the "Answer Choices:" block,
    as on the hub."""
    words = Words(seed)
    tasks = ("Diagnosis", "Treatment", "Basic Science")
    rows = []
    for k in range(n):
        options = dict(zip("ABCDEFGHIJ", words.options(10, 2)))
        choices = " ".join(f"({letter}) {text}" for letter, text in options.items())
        rows.append({"id": f"Text-{k}", "question": f"A patient from {words.word()} presents. {words.question()}\n"
                     f"Answer Choices: {choices}", "options": options, "label": "ABCDEFGHIJ"[int(words.rng.integers(10))],
                     "medical_task": tasks[k % 3], "body_system": "Cardiovascular", "question_type": "Reasoning"})
    _write_jsonl(rows, out / "test.jsonl")


def mmlu_pro(out: Path, seed: int, categories: list[str], n: int) -> None:
    """`test.jsonl`: `n` rows of each category the cross-task suite asks about and of one it does
    not, eight options padded with "N/A" to ten as on the hub (the loader drops the padding)."""
    words = Words(seed)
    rows = []
    for _ in range(n):
        for category in [*categories, "other"]:
            idx = int(words.rng.integers(8))
            rows.append({"question_id": len(rows), "question": words.question(),
                         "options": words.options(8, 1) + ["N/A", "N/A"], "answer": "ABCDEFGHIJ"[idx],
                         "answer_index": idx, "cot_content": "", "category": category, "src": f"ori_mmlu-{category}"})
    _write_jsonl(rows, out / "test.jsonl")


#: BBH label tasks whose labels are not Yes/No
_BBH_LABELS = {"boolean_expressions": ("True", "False"), "formal_fallacies": ("valid", "invalid")}


def bbh(task: str, path: Path, seed: int, n: int) -> None:
    """`path`: `n` rows (input, target) of the BBH task `task`, each target in the task's answer
    form (`selfknow.stages.tasks.bbh.TASK_FORMS`)."""
    words = Words(seed)
    rows = []
    for _ in range(n):
        form = TASK_FORMS[task]
        if form == "choice":
            target = f"({'ABCD'[int(words.rng.integers(4))]})"
        elif form == "label":
            target = str(words.rng.choice(_BBH_LABELS.get(task, ("Yes", "No"))))
        elif form == "number":
            target = str(int(words.rng.integers(2, 20)))
        elif form == "words":
            target = " ".join(sorted(words.phrase(4).lower().split()))
        else:
            target = ") ]"
        rows.append({"input": words.question(), "target": target})
    _write_jsonl(rows, path)


def build(config: dict) -> list[Path]:
    """Write a fixture at the `path:` of every dataset of `config` and return the paths. Sizes
    follow the config: the ranges of TriviaQA and Jeopardy, the persistent test size for
    BioASQ, `lcae.n_items` for MedXpertQA; LADDER's extension tasks (GSM8K, HumanEval, BFCL)
    get EXTENSION_ROWS rows of the offline analogues, in each benchmark's row schema; MMLU-Pro
    and BBH two rows more per category / task than the cross-task suite asks."""
    seed = config["seed"]
    written = []
    for k, (name, spec) in enumerate(sorted(config["datasets"].items())):
        if "path" not in spec:
            raise ValueError(f"datasets.{name}: the rehearsal config must give a `path:` for its stand-in")
        out, loader = Path(spec["path"]), spec["loader"]
        if loader == "triviaqa":
            triviaqa(spec, out, seed + k)
        elif loader == "jeopardy":
            jeopardy(spec, out, seed + k)
        elif loader == "bioasq":
            bioasq(spec, out, seed + k, config["persistent"]["n_test"])
        elif loader == "mmlu":
            mmlu(spec, out, seed + k)
        elif loader == "medxpertqa":
            medxpertqa(out, seed + k, config["lcae"]["n_items"] + 10)
        elif loader == "mmlu_pro":
            suite = config["ladder"]["cross_task"]["suites"]["mmlu_pro"]
            mmlu_pro(out, seed + k, suite["domains"], config["ladder"]["cross_task"]["items_per_domain"] + 2)
        elif loader == "bbh":
            bbh(spec["config_name"], out, seed + k, config["ladder"]["cross_task"]["items_per_domain"] + 2)
        elif loader == "gsm8k":
            _write_jsonl(analogues.gsm8k_rows(EXTENSION_ROWS, seed + k), out / "test.jsonl")
        elif loader == "humaneval":
            _write_jsonl(analogues.humaneval_rows(EXTENSION_ROWS, seed + k), out / "test.jsonl")
        elif loader == "bfcl":
            questions, answers = analogues.bfcl_rows(EXTENSION_ROWS, seed + k)
            answers_path = bfcl_files(spec)[1]  # gorilla's layout, JSON lines under a .json name
            _write_jsonl(questions, out)
            _write_jsonl(answers, answers_path)
            written.append(answers_path)
        else:
            raise ValueError(f"datasets.{name}: no rehearsal stand-in for loader {loader!r}")
        written.append(out)
    return written


def corpus(paths: list[Path]) -> list[str]:
    """Every text field of the fixtures at `paths` (files or directories), for training the
    stand-in tokenizer."""
    texts = []

    def walk(x):
        if isinstance(x, str):
            texts.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    files = [f for p in paths for f in (sorted(p.rglob("*.json*")) if p.is_dir() else [p])]
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            walk(json.loads(text))
        except json.JSONDecodeError:  # JSON lines: .jsonl, and BFCL's files under a .json name
            for line in text.splitlines():
                walk(json.loads(line))
    return texts
