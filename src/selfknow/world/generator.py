"""A synthetic knowledge world: invented domains, entities and facts with a time curriculum.

The offline default of the pipeline needs models whose knowledge *evolves* across checkpoints
(persistent calibration, SPEC §1: knowledge contrast sets between evaluation checkpoints) and
differs by domain (LADDER, SPEC §2: domain-level self-assessment). No public small model has
that with a known ground truth, so we build the world the models learn:

* ``n_domains`` domains (``"zorbian_geography"``, ...), each with ``entities_per_domain``
  invented subject entities and ``relations_per_domain`` relations, one fact per
  (subject, relation);
* a per-domain frequency weight (log-spaced between ``skew_min`` and ``skew_max``, assigned to
  domains in a seeded random order) multiplies how often a domain's facts appear in the corpus,
  so accuracy differs by domain;
* a time curriculum of ``n_phases`` phases: a fact is *introduced* in some phase, may be
  *rewritten* (its value changes, the latest value is the reference) and may become *rare*
  (repeated with weight ``rare_factor`` from some phase on, so the model forgets it).

The corpus is ordered by phase; the trainer (``selfknow.world.trainer``) walks it phase by phase
and saves a checkpoint at the end of each phase. Everything is derived from ``cfg["seed"]``
through ``numpy.random.default_rng`` streams, so the same config gives byte-identical files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from selfknow.records import ITEM_COLUMNS, write_parquet
from selfknow.schema import defaults

LETTERS = ("A", "B", "C", "D")

#: the world's settings: their list, meaning and defaults are the config schema's
#: `world.generator` (`seed` is the config's `world.seed`)
DEFAULT_WORLD: dict[str, Any] = {"seed": 0, **defaults("world.generator")}
"""Tuned (Nov 2026) with ``DEFAULT_FAMILIES["wm-small"]`` to ~4 CPU-minutes per family: 1,800
facts (1,440 test) of which 30 % are known from phase 1 and 14 % arrive in each later phase;
~9 mentions per active fact and phase (x2.5 when new), domain weights 0.5..3 (accuracy spread
between domains), and 35 % of facts go silent in a later phase (forgetting -> regressions
between checkpoints). Short QA lines only (no statements), little MCQ practice: every token
the 2-layer model reads should be one of the facts it is asked about.
"""

# ---------------------------------------------------------------------------------------------
# The built-in fields: (field name, relations), read from fields.tsv beside this module. A relation
# is (question template, statement template, value kind, pool size or 0 for the world's
# value_pool, alias template). Value kinds: "name" (invented word), "person" (invented name;
# alias "Master <name>"), "year", or a fixed list name from _FIXED_POOLS. An alias template
# ("{v} City") adds an alias.

@dataclass(frozen=True)
class Relation:
    question: str
    statement: str
    kind: str
    pool: int
    alias: str | None = None


def _read_fields(path: Path) -> list[tuple[str, list[Relation]]]:
    """The fields of a relations table (fields.tsv: one row per relation, a field's rows
    together, `#` lines comments), in the table's order."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    fields: dict[str, list[Relation]] = {}
    for row in lines[1:]:
        field, question, statement, kind, pool, alias = row.split("\t")
        fields.setdefault(field, []).append(Relation(question, statement, kind, int(pool), alias or None))
    return list(fields.items())


_FIELDS = _read_fields(Path(__file__).with_name("fields.tsv"))

_PREFIXES = [
    "zorbian", "quellish", "marvonic", "tessarine", "ulmric", "vendari", "kastovan", "brelish",
    "orandic", "yssarian", "pellucan", "drovian", "fennish", "halcorean", "irvanic", "jostari",
    "lumbrian", "nexorian", "ostrevan", "sarrowan",
]

_FIXED_POOLS: dict[str, list[str]] = {
    "colors": ["red", "blue", "green", "yellow", "white", "black", "purple", "orange", "grey", "pink"],
    "instruments": ["harp", "flute", "drum", "horn", "lute", "bell", "violin", "organ", "pipe"],
    "foods": ["honey", "barley", "fish", "moss", "berries", "roots", "seeds", "beans", "rice", "nuts"],
    "materials": ["granite", "marble", "oak", "brick", "glass", "iron", "clay", "sandstone", "bronze"],
    "realms": ["war", "rain", "harvest", "death", "the sea", "the sun", "wisdom", "fire", "dreams",
               "the hunt", "music", "trade"],
    "animals": ["owl", "wolf", "stag", "serpent", "eagle", "bear", "fox", "crane", "boar", "hare"],
    "organs": ["liver", "heart", "lungs", "kidneys", "skin", "eyes", "brain", "stomach", "spleen"],
    "virtues": ["courage", "patience", "honesty", "silence", "mercy", "humility", "justice",
                "temperance", "loyalty"],
    "powers": ["steam", "wind", "water", "coal", "clockwork", "oxen", "tides", "springs", "sails"],
    "goods": ["salt", "timber", "wool", "copper", "tea", "amber", "spices", "silk", "wine", "glass"],
}

_ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kr", "tr", "th", "sh", "st", "qu", "y", "j", "c", "w"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rk", "sk", "v"]


def _resolve(cfg: dict | None) -> dict:
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(DEFAULT_WORLD))
    if unknown:
        raise KeyError(f"world config: unknown key(s) {unknown}; known: {sorted(DEFAULT_WORLD)}")
    out = {**DEFAULT_WORLD, **cfg}
    if len(out["intro_probs"]) != out["n_phases"]:
        raise ValueError(f"world config: intro_probs has {len(out['intro_probs'])} entries, "
                         f"n_phases is {out['n_phases']}")
    if not 1 <= out["relations_per_domain"] <= 3:
        raise ValueError("world config: relations_per_domain must be in 1..3")
    if out["value_pool"] < 4:
        raise ValueError("world config: value_pool must be >= 4 (MCQ needs 3 distractors)")
    if out["n_phases"] < 2:
        raise ValueError("world config: n_phases must be >= 2")
    return out


class _Names:
    """Unique invented words drawn from syllables (one registry for the whole world, so no name
    is both a subject and a value, or a value of two unrelated pools)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, min_syl: int = 2, max_syl: int = 3) -> str:
        while True:
            n = int(self.rng.integers(min_syl, max_syl + 1))
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(n)]
            w = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if w not in self.used and 4 <= len(w) <= 11:
                self.used.add(w)
                return w

    def person(self) -> str:
        # One word: a two-word name costs a tiny model twice the tokens to get exactly right.
        return self.word(2, 2)


def _value_pool(rel: Relation, size_default: int, names: _Names, rng: np.random.Generator) -> list[str]:
    size = rel.pool or size_default
    if rel.kind == "name":
        return [names.word() for _ in range(size)]
    if rel.kind == "person":
        return [names.person() for _ in range(size)]
    if rel.kind == "year":
        years = rng.choice(np.arange(1200, 1990), size=size, replace=False)
        return [str(int(y)) for y in years]
    pool = list(_FIXED_POOLS[rel.kind])
    return pool[: rel.pool] if rel.pool else pool


def _aliases(value: str, rel: Relation) -> list[str]:
    out = [value]
    if rel.kind == "person":
        out.append(f"Master {value}")
    if rel.alias:
        out.append(rel.alias.format(v=value))
    return out


def domain_names(n_domains: int) -> list[str]:
    """The domain ids of a world with ``n_domains`` domains ("zorbian_geography", ...)."""
    out = []
    for i in range(n_domains):
        field = _FIELDS[i % len(_FIELDS)][0]
        prefix = _PREFIXES[i % len(_PREFIXES)] + ("" if i < len(_FIELDS) else str(i // len(_FIELDS)))
        out.append(f"{prefix}_{field}")
    return out


def build_facts(cfg: dict | None = None) -> pd.DataFrame:
    """The fact table of a world: one row per (domain, subject, relation) with its curriculum.

    Columns: fact_id, domain, domain_weight, subject, relation (index within the domain),
    question, statement (template with ``{v}``), value_kind, value (final = reference),
    old_value (value before the rewrite, None if not rewritten), values_by_phase (list, None
    before introduction), aliases (of the final value), pool (the relation's value pool, for
    MCQ distractors), intro_phase, rewrite_phase (-1 none), rare_phase (-1 none),
    introduced_late / rewritten / rare (bool flags), split.
    """
    c = _resolve(cfg)
    root = np.random.SeedSequence(int(c["seed"]))
    rng_names, rng_plan, rng_split, rng_skew = (np.random.default_rng(s) for s in root.spawn(4))
    names = _Names(rng_names)
    P = int(c["n_phases"])
    doms = domain_names(int(c["n_domains"]))
    weights = np.geomspace(c["skew_min"], c["skew_max"], len(doms))[rng_skew.permutation(len(doms))]
    probs = np.asarray(c["intro_probs"], float)
    probs = probs / probs.sum()
    rows = []
    for d, dom in enumerate(doms):
        field_name, rels = _FIELDS[d % len(_FIELDS)]
        rels = rels[: c["relations_per_domain"]]
        n_sub = int(c["entities_per_domain"])
        subjects = [names.word(2, 3) for _ in range(n_sub)]
        for r, rel in enumerate(rels):
            pool = _value_pool(rel, int(c["value_pool"]), names, rng_names)
            vals = [pool[i] for i in rng_names.integers(0, len(pool), n_sub)]
            for s, subj in enumerate(subjects):
                rows.append(dict(domain=dom, domain_weight=float(weights[d]), subject=subj,
                                 relation=r, rel=rel, pool=pool, first_value=str(vals[s])))
    n = len(rows)
    intro = rng_plan.choice(P, size=n, p=probs)
    # Rewrites and rarity happen strictly after the introduction phase.
    u_rw, u_rare = rng_plan.random(n), rng_plan.random(n)
    rw_phase = np.full(n, -1)
    rare_phase = np.full(n, -1)
    for i in range(n):
        later = np.arange(intro[i] + 1, P)
        if len(later) == 0:
            continue
        if u_rw[i] < c["rewrite_rate"]:
            rw_phase[i] = int(rng_plan.choice(later))
        if u_rare[i] < c["rare_rate"]:
            lo = rw_phase[i] + 1 if rw_phase[i] >= 0 else intro[i] + 1
            cand = np.arange(lo, P)
            if len(cand):
                rare_phase[i] = int(rng_plan.choice(cand))
    test = _stratified_split(doms, [r["domain"] for r in rows], c["test_fraction"], rng_split)
    out = []
    for i, row in enumerate(rows):
        rel: Relation = row["rel"]
        pool = row["pool"]
        first = row["first_value"]
        final = first
        if rw_phase[i] >= 0:
            others = [v for v in pool if v != first]
            final = str(others[int(rng_plan.integers(len(others)))])
        by_phase = [None if p < intro[i] else (final if 0 <= rw_phase[i] <= p else first)
                    for p in range(P)]
        out.append(dict(
            fact_id=f"{row['domain']}-{row['relation']}-{row['subject']}".lower(),
            domain=row["domain"], domain_weight=row["domain_weight"], subject=row["subject"],
            relation=int(row["relation"]), question=rel.question.format(s=row["subject"]),
            statement=rel.statement.replace("{s}", row["subject"]), value_kind=rel.kind,
            value=final, old_value=first if rw_phase[i] >= 0 else None, values_by_phase=by_phase,
            aliases=_aliases(final, rel), old_aliases=_aliases(first, rel), pool=list(pool),
            intro_phase=int(intro[i]), rewrite_phase=int(rw_phase[i]), rare_phase=int(rare_phase[i]),
            introduced_late=bool(intro[i] > 0), rewritten=bool(rw_phase[i] >= 0),
            rare=bool(rare_phase[i] >= 0), split="test" if test[i] else "train"))
    return pd.DataFrame(out)


def _stratified_split(doms: Sequence[str], fact_doms: Sequence[str], test_fraction: float,
                      rng: np.random.Generator) -> np.ndarray:
    fact_doms = np.asarray(fact_doms)
    test = np.zeros(len(fact_doms), bool)
    for dom in doms:
        idx = np.flatnonzero(fact_doms == dom)
        k = int(round(test_fraction * len(idx)))
        test[rng.permutation(idx)[:k]] = True
    return test


# ---------------------------------------------------------------------------------------------
# Prompt formats: the corpus is written in these, so few-shot prompts look like training text.

def qa_line(question: str, answer: str) -> str:
    return f"Question: {question}\nAnswer: {answer}\n\n"


def qa_prompt(question: str, shots: Sequence[tuple[str, str]] = ()) -> str:
    """Few-shot short-answer prompt: ``"Question: q\\nAnswer: a\\n\\n"`` per shot, then
    ``"Question: {question}\\nAnswer:"``. Greedy decoding stopped at the first newline gives the
    answer (with a leading space to strip)."""
    return "".join(qa_line(q, a) for q, a in shots) + f"Question: {question}\nAnswer:"


def mcq_prompt(question: str, choices: Sequence[str]) -> str:
    """4-option prompt ending in ``"Correct option:"``: the next token " A".." D" is the model's
    choice. (Not "Answer:", which in the corpus precedes short answers: a tiny model would then
    answer every short-answer question with a letter.)"""
    if len(choices) != 4:
        raise ValueError(f"mcq_prompt needs 4 choices, got {len(choices)}")
    opts = "".join(f"{L}. {c}\n" for L, c in zip(LETTERS, choices))
    return f"Question: {question}\n{opts}Correct option:"


def _mcq_options(value: str, pool: Sequence[str], rng: np.random.Generator) -> tuple[list[str], str]:
    """The answer at a random position among three distinct distractors from the relation's value
    pool (a rewritten fact's old value can be drawn, and is then a lure)."""
    cand = sorted(set(pool) - {value})
    if len(cand) < 3:
        raise ValueError(f"value pool too small for MCQ distractors: {list(pool)!r}")
    picks = list(rng.choice(cand, size=3, replace=False))
    pos = int(rng.integers(4))
    opts = [str(x) for x in picks]
    opts.insert(pos, value)
    return opts, LETTERS[pos]


def build_items(facts: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """QA items (one per fact, reference = final value, aliases) and MCQ items (one per fact,
    4 distinct options, answer letter), in the ``ITEM_COLUMNS`` schema plus metadata."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 7]))
    meta = ["fact_id", "intro_phase", "rewrite_phase", "rare_phase", "domain_weight"]
    qa = pd.DataFrame({
        "item_id": "wqa-" + facts["fact_id"], "dataset": "world_qa", "domain": facts["domain"],
        "question": facts["question"], "choices": None, "answer": facts["value"],
        "aliases": facts["aliases"], "split": facts["split"], **{m: facts[m] for m in meta}})
    qa["choices"] = pd.Series([None] * len(qa), dtype=object)
    choices, letters = [], []
    for value, pool in zip(facts["value"], facts["pool"]):
        opts, letter = _mcq_options(value, pool, rng)
        choices.append(opts)
        letters.append(letter)
    mcq = pd.DataFrame({
        "item_id": "wmcq-" + facts["fact_id"], "dataset": "world_mcq", "domain": facts["domain"],
        "question": facts["question"], "choices": choices, "answer": letters,
        "aliases": [[L] for L in letters], "split": facts["split"], **{m: facts[m] for m in meta}})
    return qa[ITEM_COLUMNS + meta], mcq[ITEM_COLUMNS + meta]


def build_corpus(facts: pd.DataFrame, cfg: dict | None = None) -> pd.DataFrame:
    """The training corpus: documents (columns phase, text) in training order.

    In phase p an active fact (introduced, with its phase-p value) gets a Poisson number of
    mentions with mean ``reps x domain_weight x (intro_boost if new or just rewritten)``;
    a rare fact's mean is further multiplied by ``rare_factor``. Mentions are QA pairs, or
    statements with probability ``statement_share``; they are shuffled and packed
    ``qa_per_doc`` to a document. Each phase also gets ``mcq_practice_per_phase`` MCQ documents
    about train-split facts (fresh distractors and letter positions, so test MCQ items are
    never seen verbatim).
    """
    c = _resolve(cfg)
    rng = np.random.default_rng(np.random.SeedSequence([int(c["seed"]), 11]))
    docs = []
    w = facts["domain_weight"].to_numpy()
    intro = facts["intro_phase"].to_numpy()
    rw = facts["rewrite_phase"].to_numpy()
    rare = facts["rare_phase"].to_numpy()
    by_phase, aliases, old_aliases = (facts[k].tolist() for k in ("values_by_phase", "aliases", "old_aliases"))
    final, statements, questions, pools = (facts[k].tolist() for k in ("value", "statement", "question", "pool"))
    for p in range(int(c["n_phases"])):
        active = intro <= p
        fresh = (intro == p) | (rw == p)
        mean = c["reps"] * w * np.where(fresh, c["intro_boost"], 1.0)
        mean = np.where((rare >= 0) & (rare <= p), mean * c["rare_factor"], mean)
        counts = np.where(active, rng.poisson(mean), 0)
        idx = np.repeat(np.arange(len(facts)), counts)
        idx = idx[rng.permutation(len(idx))]
        stmt = rng.random(len(idx)) < c["statement_share"]
        use_alias = rng.random(len(idx)) < 0.5
        mentions = []
        for i, s, a in zip(idx, stmt, use_alias):
            v = by_phase[i][p]
            if s:
                al = aliases[i] if v == final[i] else old_aliases[i]
                shown = al[-1] if a and len(al) > 1 else v
                mentions.append(statements[i].replace("{v}", shown) + "\n")
            else:
                mentions.append(qa_line(questions[i], v))
        k = int(c["qa_per_doc"])
        texts = ["".join(mentions[j:j + k]) for j in range(0, len(mentions), k)]
        # MCQ practice: train-split facts active now, with their current value.
        pool_idx = np.flatnonzero(active & (facts["split"].to_numpy() == "train"))
        n_mcq = min(int(c["mcq_practice_per_phase"]), len(pool_idx) * 4) if len(pool_idx) else 0
        for i in rng.choice(pool_idx, size=n_mcq, replace=True) if n_mcq else []:
            v = by_phase[i][p]
            opts, letter = _mcq_options(v, pools[i], rng)
            texts.append(mcq_prompt(questions[i], opts) + f" {letter}\n\n")
        order = rng.permutation(len(texts))
        docs.extend((p, texts[j]) for j in order)
    return pd.DataFrame(docs, columns=["phase", "text"])


def generate_world(cfg: dict | None, out_dir: str | os.PathLike) -> None:
    """Write the world described by ``cfg`` (keys: see ``DEFAULT_WORLD``) to ``out_dir``:
    ``facts.parquet``, ``corpus.parquet`` (phase, text), ``qa.parquet`` and ``mcq.parquet``
    (item schema ``ITEM_COLUMNS`` + fact metadata). Deterministic in ``cfg["seed"]``."""
    c = _resolve(cfg)
    out = Path(out_dir)
    facts = build_facts(c)
    qa, mcq = build_items(facts, c["seed"])
    corpus = build_corpus(facts, c)
    fact_cols = facts.drop(columns=["pool", "old_aliases"])
    write_parquet(fact_cols, out / "facts.parquet")
    write_parquet(corpus, out / "corpus.parquet")
    write_parquet(qa, out / "qa.parquet")
    write_parquet(mcq, out / "mcq.parquet")


def generate_job(world: dict, outputs: dict[str, str]) -> None:
    """The workflow's world (rules/world.smk): every file `generate_world` writes, in the
    directory of the rule's outputs."""
    generate_world(dict(world), Path(outputs["corpus"]).parent)
