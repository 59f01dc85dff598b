"""LADDER session-turn records: the schema every session source emits (the live session
engine and the importer of the authors' released sessions), and that importer.

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
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from selfknow.records import read_json_file

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
    df = pd.DataFrame(rows)
    dec = decode_feedback(df["feedback_text"], "frozen")
    df["decoded_category"] = dec["decoded_category"].to_numpy()
    df["decoded_label"] = dec["decoded_label"].to_numpy()
    df = df[TURN_COLUMNS]
    validate_turns(df, str(path))
    return df


def import_sessions(import_dir: str | Path) -> pd.DataFrame:
    """All `capbound_sessions_*.json` in `import_dir` (searched recursively) as one turn table."""
    import_dir = Path(import_dir)
    files = sorted(import_dir.rglob("capbound_sessions_*.json"))
    if not files:
        raise FileNotFoundError(f"{import_dir}: no capbound_sessions_*.json files")
    return pd.concat([read_released_sessions(f) for f in files], ignore_index=True)
