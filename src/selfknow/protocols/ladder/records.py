"""LADDER session-turn records: the schema every session source emits (the live session
engine, the importer of the authors' released sessions, and session tables from anywhere
else), and the readers of both file forms.

One row per turn (SPEC §2 "Sessions"; paper §3, §B.1). Columns, in order:

  model                 answering model (registry name, or the released `agent_model`)
  session_id            str, unique within a model ("0", "1", ...)
  turn                  int, 1-based position in the session
  item_id               question id; the question-cluster bootstrap clusters on it
  question              question text as shown to the model
  domain                MMLU subject (the estimators' domain key)
  tier                  strong / mid / weak (per-model subject tier) or None
  reference             reference answer (option letter)
  answer                parsed answer, None when unparsed (scored wrong)
  parsed                bool, answer is not None
  abstain               bool, the model abstained
  confidence            float in [0, 1], the model's stated confidence
  correct               bool, reference-scored outcome (hidden from noisy-feedback estimators)
  feedback_text         the simulated user's reply
  decoded_category      rule class of the reply (frozen rules at record time; see feedback.py)
  decoded_label         float 1 / 0 / NaN: the strict label of that class
  in_expertise          bool, the domain is in the persona's expertise
  persona_id            persona identifier
  persona_expertise     the persona's expertise domains, "|"-joined
  persona_style         response style (e.g. academic, casual)
  persona_tolerance     float, tolerance parameter
  persona_explicitness  float, explicitness parameter (NaN if the simulator has none)
  user_model            the model (or "rules") simulating the user
  source                provenance: file name or run id

`score_sessions` re-decodes `feedback_text` with the requested rule set, so a producer may
leave `decoded_category` / `decoded_label` empty.

A session table (CSV, JSON Lines or parquet; `read_session_table`, docs/own-results.md) needs
REQUIRED_COLUMNS: model, session_id (text), turn (integer >= 1, unique within a session),
domain, confidence (in [0, 1]), correct (0/1 or true/false), feedback_text (the user's reply;
may be empty) and in_expertise (0/1 or true/false). Every other column of TURN_COLUMNS is
optional: item_id defaults to `item_id_for(domain, question)` (or domain/turn without a
question), parsed to "answer is not empty" (true without an answer column), abstain to false,
source to the file name; the decoded columns are always recomputed.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from selfknow.records import RecordTable, read_json_file, shown

from .feedback import decode_feedback

TURN_COLUMNS = [
    "model", "session_id", "turn", "item_id", "question", "domain", "tier", "reference",
    "answer", "parsed", "abstain", "confidence", "correct", "feedback_text",
    "decoded_category", "decoded_label", "in_expertise", "persona_id", "persona_expertise",
    "persona_style", "persona_tolerance", "persona_explicitness", "user_model", "source",
]
# Columns the estimators and metrics need; everything else is provenance.
REQUIRED_COLUMNS = ["model", "session_id", "turn", "domain", "confidence", "correct",
                    "feedback_text", "in_expertise"]

# Domains in the released archives outside the 20-subject MMLU target: paper §B.1 excludes
# the 232 numerical math-word-problem turns of the Llama/Mistral archives from the target,
# while the released aggregates include them. The importer keeps them; filter for §B.1.
NON_MMLU_DOMAINS = ("math_word_problems",)

_TURN_KEYS = ["turn", "domain", "question", "gt_answer", "agent_answer", "agent_confidence",
              "gt_correct", "user_response", "in_user_expertise"]


def item_id_for(domain: str, question: str) -> str:
    """A stable id for a released question: the released turns carry no item id, so hash the
    (subject, question text) pair. Identical questions in one subject share an id."""
    h = hashlib.sha1(f"{domain}\x1f{question}".encode("utf-8")).hexdigest()[:12]
    return f"mmlu/{domain}/{h}"


def validate_turns(turns: pd.DataFrame, source: str = "turns") -> None:
    """Raise a ValueError naming the problem if `turns` cannot be scored."""
    missing = [c for c in REQUIRED_COLUMNS if c not in turns.columns]
    if missing:
        raise ValueError(f"{source}: missing columns {missing}")
    conf = pd.to_numeric(turns["confidence"], errors="coerce")
    bad = turns.index[conf.isna() | (conf < 0) | (conf > 1)]
    if len(bad):
        raise ValueError(f"{source}: confidence missing or outside [0, 1] in rows {list(bad[:5])}")
    dup = turns.duplicated(["model", "session_id", "turn"])
    if dup.any():
        raise ValueError(f"{source}: duplicate (model, session_id, turn) in rows {list(turns.index[dup][:5])}")


# expected JSON types of the released turn fields (bool is an int to Python: rejected apart)
_TURN_TYPES = {"turn": (int,), "agent_confidence": (int, float), "gt_correct": (bool,),
               "in_user_expertise": (bool,), "domain": (str,), "question": (str,),
               "user_response": (str,), "agent_answer": (str, type(None))}


def _check_turn_types(t: dict, where: str) -> None:
    for key, types in _TURN_TYPES.items():
        v = t[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise ValueError(f"{where}.{key}: expected {'/'.join(x.__name__ for x in types)}, "
                             f"got {type(v).__name__} {v!r}")


def read_released_sessions(path: str | Path) -> pd.DataFrame:
    """Turn one released `capbound_sessions_<model>_<ts>.json` into session-turn records."""
    path = Path(path)
    doc = read_json_file(path)
    if not isinstance(doc, dict) or "sessions" not in doc:
        raise ValueError(f"{path}: no 'sessions' key")
    if not isinstance(doc["sessions"], list):
        raise ValueError(f"{path}: 'sessions' must be a list, got {type(doc['sessions']).__name__}")
    meta = doc.get("metadata", {})
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: 'metadata' must be an object, got {type(meta).__name__}")
    rows = []
    for si, sess in enumerate(doc["sessions"]):
        if not isinstance(sess, dict):
            raise ValueError(f"{path}: sessions[{si}] must be an object, got {type(sess).__name__}")
        if "log" not in sess:
            raise ValueError(f"{path}: sessions[{si}] has no 'log'")
        if not isinstance(sess["log"], list):
            raise ValueError(f"{path}: sessions[{si}].log must be a list, got {type(sess['log']).__name__}")
        model = sess.get("agent_model", meta.get("agent_model"))
        if model is None:
            raise ValueError(f"{path}: sessions[{si}] names no agent_model")
        persona = sess.get("persona", {}) or {}
        if not isinstance(persona, dict):
            raise ValueError(f"{path}: sessions[{si}].persona must be an object, got {type(persona).__name__}")
        for ti, t in enumerate(sess["log"]):
            if not isinstance(t, dict):
                raise ValueError(f"{path}: sessions[{si}].log[{ti}] must be an object, got {type(t).__name__}")
            missing = [k for k in _TURN_KEYS if k not in t]
            if missing:
                raise ValueError(f"{path}: sessions[{si}].log[{ti}] lacks {missing}")
            _check_turn_types(t, f"{path}: sessions[{si}].log[{ti}]")
            ans = t["agent_answer"]
            rows.append({
                "model": str(model),
                "session_id": str(sess.get("session_id", si)),
                "turn": int(t["turn"]),
                "item_id": item_id_for(t["domain"], t["question"]),
                "question": t["question"],
                "domain": t["domain"],
                "tier": t.get("tier"),
                "reference": t["gt_answer"],
                "answer": ans,
                "parsed": ans is not None,
                "abstain": bool(t.get("agent_abstain", False)),
                "confidence": float(t["agent_confidence"]),
                # The released gt_correct already scores an unparsed answer as wrong.
                "correct": bool(t["gt_correct"]),
                "feedback_text": t["user_response"],
                "in_expertise": bool(t["in_user_expertise"]),
                "persona_id": persona.get("id"),
                "persona_expertise": "|".join(persona.get("expertise", []) or []),
                "persona_style": persona.get("style"),
                "persona_tolerance": float(persona["tolerance"]) if persona.get("tolerance") is not None else np.nan,
                "persona_explicitness": float(persona["explicitness"]) if persona.get("explicitness") is not None else np.nan,
                "user_model": sess.get("user_model", meta.get("user_model")),
                "source": path.name,
            })
    df = _decoded(pd.DataFrame(rows))
    validate_turns(df, str(path))
    return df


def _decoded(df: pd.DataFrame) -> pd.DataFrame:
    dec = decode_feedback(df["feedback_text"], "frozen")
    df["decoded_category"] = dec["decoded_category"].to_numpy()
    df["decoded_label"] = dec["decoded_label"].to_numpy()
    return df[TURN_COLUMNS]


def read_session_table(path: str | Path) -> pd.DataFrame:
    """Session-turn records from a session table (the module docstring; CSV, JSON Lines or
    parquet), checked field by field: a ValueError names the file, the row and the column."""
    t = RecordTable(path)
    t.require(*REQUIRED_COLUMNS)
    f = t.frame

    def optional(column: str) -> pd.Series:
        """The column as objects with None for missing cells (an absent column: all None)."""
        return f[column].astype(object).where(f[column].notna(), None) if t.has(column) else pd.Series(
            None, index=f.index, dtype=object)

    domain, question, answer = t.text("domain"), optional("question"), optional("answer")
    turn = t.integer("turn")
    bad = np.flatnonzero(turn < 1)
    if bad.size:
        raise t.error(int(bad[0]), "turn", f"turns count from 1, got {turn[bad[0]]}")

    df = pd.DataFrame({
        "model": t.text("model"), "session_id": t.text("session_id"), "turn": turn,
        "item_id": (t.text("item_id") if t.has("item_id") else
                    [item_id_for(d, q) if isinstance(q, str) else f"{d}/{n}" for d, q, n in zip(domain, question, turn)]),
        "question": question, "domain": domain, "tier": optional("tier"), "reference": optional("reference"),
        "answer": answer,
        "parsed": t.binary("parsed") if t.has("parsed") else (answer.notna().to_numpy() if t.has("answer") else True),
        "abstain": t.binary("abstain", default=False), "confidence": t.probability("confidence"),
        "correct": t.binary("correct"), "feedback_text": f["feedback_text"].fillna("").astype(str),
        "decoded_category": None, "decoded_label": np.nan, "in_expertise": t.binary("in_expertise"),
        "persona_id": optional("persona_id"), "persona_expertise": optional("persona_expertise"),
        "persona_style": optional("persona_style"),
        "persona_tolerance": t.number("persona_tolerance", missing_ok=True) if t.has("persona_tolerance") else np.nan,
        "persona_explicitness": (t.number("persona_explicitness", missing_ok=True) if t.has("persona_explicitness")
                                 else np.nan),
        "user_model": optional("user_model"), "source": t.text("source", default=t.path.name)})
    dup = np.flatnonzero(df.duplicated(["model", "session_id", "turn"]).to_numpy())
    if dup.size:
        r = df.iloc[dup[0]]
        raise t.error(int(dup[0]), "turn", f"a second turn {r['turn']} of session {shown(r['session_id'])} of "
                                           f"model {shown(r['model'])}")
    return _decoded(df)


#: suffixes of session tables (`read_session_table`); a `.json` file is a released session file
SESSION_TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".parquet")


def session_files(source: str | Path) -> list[Path]:
    """The session files of `source`: the file itself, or under a directory (recursively) every
    released `capbound_sessions_*.json` and every session table."""
    source = Path(source)
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such file or directory")
    files = sorted(p for p in source.rglob("*") if p.is_file() and (
        (p.suffix == ".json" and p.name.startswith("capbound_sessions_")) or p.suffix.lower() in SESSION_TABLE_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"{source}: no capbound_sessions_*.json files and no session tables "
                                f"({', '.join(SESSION_TABLE_SUFFIXES)})")
    return files


def import_sessions(sources: str | Path | list[str | Path]) -> pd.DataFrame:
    """Every session file of `sources` (files or directories, `session_files`) as one turn
    table; released `.json` files by `read_released_sessions`, tables by `read_session_table`."""
    paths = [f for s in ([sources] if isinstance(sources, (str, Path)) else sources) for f in session_files(s)]
    turns = pd.concat([read_released_sessions(f) if f.suffix == ".json" else read_session_table(f) for f in paths],
                      ignore_index=True)
    validate_turns(turns, ", ".join(map(str, paths)))
    return turns
