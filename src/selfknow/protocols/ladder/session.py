"""The LADDER session engine (paper §3, §A, §B.1; SPEC §2 "Sessions").

Per answering model: `n_sessions` sessions of `n_turns` turns over an MCQ pool. Each turn the
model answers the current question only (answer + confidence), the reference scores it, and a
simulated user with the session's persona replies in natural language. The turn record keeps
question, domain, tier, answer, confidence, reference outcome, feedback text and persona state.

As in the authors' runner (yin1245/selfbound `capbound_session_api.py`):
* tiers come from the model's per-domain accuracy (`agent_profile`): domains sorted by
  accuracy, top third strong, then mid, then weak (6/7/7 of 20); the authors' own tiers (from
  their separate profiling, in each released file's metadata) can be given instead;
* a session takes int(0.4 n) strong, int(0.2 n) mid and the rest weak questions (20/10/20 of
  50), each drawn without replacement from its tier's shuffled pool, then shuffled together.

A session has two halves that need nothing of each other but the answers: the answering
model answers each question on its own, never seeing a reply (`iter_session_answers`), and the
simulated user replies to each answered turn (`iter_session_feedback`). The workflow runs them
as two jobs, so a local model's GPU job never waits on an API user; `iter_sessions` runs both
in one process, with the same records.

Determinism and resumption: session s uses its own random streams seeded by (seed, s) (its
questions from [seed, s, 0], its user's choices from [seed, s, 1]), so a session's content does
not depend on which other sessions ran, or in which job; `done_session_ids` sessions are
skipped, and `run_sessions_to_dir` writes one parquet chunk per session atomically.

Answering (`per_turn`): the authors' runner calls the answering model afresh at every turn, and
their released sessions show it (a question's answer and confidence vary across the sessions
it appears in), so a per-turn call is session `s`'s draw `s + 1` of the question (the cache
tells draws apart where replies may vary; deterministic backends answer from one entry).
Otherwise each pool item is answered once and its answer reused in every session. Tiers not
given come from one answer per pool item (draw 0).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from selfknow.models.base import LM
from selfknow.protocols.ladder.answering import (ANSWER_COLUMNS, LETTERS, AnswerFn,
                                                 make_answer_fn)
from selfknow.protocols.ladder.feedback import decode_feedback
from selfknow.protocols.ladder.personas import Persona, make_persona
from selfknow.protocols.ladder.records import TURN_COLUMNS
from selfknow.protocols.ladder.simulators import (EXPLICIT_KINDS, RuleBasedUser, TurnContext,
                                                   User)
from selfknow.records import write_parquet

log = logging.getLogger(__name__)

#: diagnostics written after records.TURN_COLUMNS by live runs: the answer parse status and
#: what the simulated user meant (its ground truth for decoder precision/recall, paper §E.1)
EXTRA_COLUMNS = ["answer_status", "feedback_intent", "feedback_kind", "feedback_explicit"]
LIVE_COLUMNS = TURN_COLUMNS + EXTRA_COLUMNS
TIERS = ("strong", "mid", "weak")
#: the authors' session composition: 40 % strong, 20 % mid, the rest weak
TIER_FRACTIONS = (0.4, 0.2)


def reference_letter(ref: object, item_id: object = None) -> str:
    """The reference option letter of an MCQ item (a letter, or a 0-based option index)."""
    if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool):
        return LETTERS[int(ref)]
    s = str(ref).strip().upper()
    if len(s) == 1 and s in LETTERS:
        return s
    if s.isdigit():
        return LETTERS[int(s)]
    raise ValueError(f"item {item_id!r}: reference answer {ref!r} is not an option letter/index")


def score_answers(items: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """Items joined with their answers and `correct` (answer == reference; None is wrong)."""
    need = {"item_id", "domain", "question", "choices", "answer"}
    miss = need - set(items.columns)
    if miss:
        raise ValueError(f"items lack columns {sorted(miss)}")
    if items["item_id"].duplicated().any():
        dup = items.loc[items["item_id"].duplicated(), "item_id"].iloc[0]
        raise ValueError(f"items: duplicate item_id {dup!r}")
    miss = set(ANSWER_COLUMNS) - set(answers.columns)
    if miss:
        raise ValueError(f"answers lack columns {sorted(miss)}")
    a = answers.drop_duplicates("item_id").set_index("item_id")
    absent = set(items["item_id"]) - set(a.index)
    if absent:
        raise ValueError(f"answers missing for {len(absent)} items, e.g. {sorted(absent)[0]!r}")
    df = items.rename(columns={"answer": "gt_answer"}).copy()
    df["gt_answer"] = [reference_letter(r, i) for r, i in zip(df["gt_answer"], df["item_id"])]
    for c in ("answer", "confidence", "answer_status"):
        df[c] = df["item_id"].map(a[c]).values
    df["answer"] = df["answer"].astype(object).where(df["answer"].notna(), None)
    df["correct"] = (df["answer"] == df["gt_answer"]).astype(bool)
    return df.reset_index(drop=True)


def agent_profile(scored: pd.DataFrame) -> dict:
    """The model's per-domain accuracy and tiers, in the authors' `agent_profile` layout:
    all_accuracy {domain: acc}, strong/mid/weak_domains (by accuracy, descending; ties by
    name), overall_accuracy. With n domains: n//3 strong, (n - n//3)//2 mid, the rest weak."""
    acc = scored.groupby("domain")["correct"].mean()
    order = sorted(acc.index, key=lambda d: (-acc[d], d))
    n = len(order)
    n_s = n // 3
    n_m = (n - n_s) // 2
    return {"all_accuracy": {d: round(float(acc[d]), 6) for d in sorted(acc.index)},
            "strong_domains": order[:n_s], "mid_domains": order[n_s:n_s + n_m],
            "weak_domains": order[n_s + n_m:],
            "overall_accuracy": round(float(scored["correct"].mean()), 6)}


def tier_map(profile: dict) -> dict[str, str]:
    return {d: t for t in TIERS for d in profile[f"{t}_domains"]}


def session_composition(n_turns: int, fractions: Sequence[float] = TIER_FRACTIONS) -> dict:
    """Questions per tier in one session: int(f_strong n), int(f_mid n), rest weak."""
    n_s, n_m = int(n_turns * fractions[0]), int(n_turns * fractions[1])
    return {"strong": n_s, "mid": n_m, "weak": n_turns - n_s - n_m}


def draw_session_items(tier_of_item: np.ndarray, n_turns: int, rng: np.random.Generator,
                       fractions: Sequence[float] = TIER_FRACTIONS) -> np.ndarray:
    """Row indices (into the pool) of one session's questions, in turn order.

    Each tier contributes its quota drawn without replacement; a tier with too few questions
    gives all it has and the shortfall is filled from the unused questions of any tier (the
    authors' pool never ran short; a small offline pool can)."""
    n_pool = len(tier_of_item)
    if n_turns > n_pool:
        raise ValueError(f"n_turns={n_turns} exceeds the question pool ({n_pool} items)")
    quota = session_composition(n_turns, fractions)
    picked = []
    for t in TIERS:
        idx = np.flatnonzero(tier_of_item == t)
        idx = idx[rng.permutation(len(idx))]
        picked.append(idx[:quota[t]])
    chosen = np.concatenate(picked)
    short = n_turns - len(chosen)
    if short:
        rest = np.setdiff1d(np.arange(n_pool), chosen)
        chosen = np.concatenate([chosen, rest[rng.permutation(len(rest))[:short]]])
    return chosen[rng.permutation(len(chosen))]


def _answers(items: pd.DataFrame, answer_fn: AnswerFn | None,
             answers: pd.DataFrame | None) -> pd.DataFrame:
    if answers is not None:
        return answers
    if answer_fn is None:
        raise ValueError("pass answer_fn (or an LM) or precomputed answers")
    return answer_fn(items)


#: one answered turn, the examinee's half of a session (`iter_session_answers`) that the
#: simulated user's half (`iter_session_feedback`) reads; session_id is the 0-based index
ANSWERED_COLUMNS = ["session_id", "turn", "item_id", "question", "choices", "domain", "tier",
                    "gt_answer", "answer", "confidence", "correct", "answer_status"]


def iter_session_answers(items: pd.DataFrame, answer_fn: AnswerFn | LM | None, *,
                         n_sessions: int, n_turns: int = 50, seed: int = 42,
                         tiers: dict[str, str] | None = None,
                         tier_fractions: Sequence[float] = TIER_FRACTIONS,
                         done_session_ids: Iterable[int] = (), answers: pd.DataFrame | None = None,
                         per_turn: bool = False) -> Iterator[tuple[int, pd.DataFrame]]:
    """The answering model's half of the sessions not in `done_session_ids`: per session, in
    session order, (session_id, its questions in turn order with the model's scored answers,
    ANSWERED_COLUMNS). The simulated user plays no part in it (the model answers each question
    on its own, never seeing a reply), so a local model's answers are made by a job of their
    own and the user's replies by another (`iter_session_feedback`).

    items: MCQ pool with ITEM_COLUMNS (answer = reference letter or index). answer_fn:
    (items, sample_index) -> answers frame (answering.ANSWER_COLUMNS), or an LM (log-prob
    answering), or None with `answers` given (one per pool item). per_turn: every turn is a
    fresh call, `answer_fn(session's items, sample_index=session_id + 1)`; else each pool
    item's one answer is reused. tiers: {domain: strong|mid|weak}; default from the model's
    accuracy on the pool (`agent_profile`)."""
    if n_sessions < 0 or n_turns <= 0:
        raise ValueError(f"n_sessions={n_sessions}, n_turns={n_turns}")
    if isinstance(answer_fn, LM):
        answer_fn = make_answer_fn(answer_fn, "cloze")
    if per_turn and answer_fn is None:
        raise ValueError("per-turn answering needs answer_fn (or an LM)")
    pooled = (score_answers(items, _answers(items, answer_fn, answers))
              if tiers is None or not per_turn else None)
    if tiers is None:
        tiers = tier_map(agent_profile(pooled))
    unknown = set(items["domain"]) - set(tiers)
    if unknown:
        raise ValueError(f"no tier for domains {sorted(unknown)}")
    bad = set(tiers.values()) - set(TIERS)
    if bad:
        raise ValueError(f"unknown tier names {sorted(bad)}; expected {TIERS}")
    items = items.reset_index(drop=True)
    tier_arr = items["domain"].map(tiers).to_numpy()
    recs = pooled.to_dict("records") if pooled is not None else None
    done = set(int(s) for s in done_session_ids)
    for sid in (s for s in range(n_sessions) if s not in done):
        idx = draw_session_items(tier_arr, n_turns, np.random.default_rng([seed, sid, 0]), tier_fractions)
        if per_turn:
            drawn = items.iloc[idx]
            turn_recs = score_answers(drawn, answer_fn(drawn, sample_index=sid + 1)).to_dict("records")
        else:
            turn_recs = [recs[i] for i in idx]
        rows = [{"session_id": sid, "turn": t, "item_id": r["item_id"], "question": r["question"],
                 "choices": list(map(str, r["choices"])), "domain": r["domain"],
                 "tier": tiers[r["domain"]], "gt_answer": r["gt_answer"], "answer": r["answer"],
                 "confidence": float(r["confidence"]), "correct": bool(r["correct"]),
                 "answer_status": r["answer_status"]} for t, r in enumerate(turn_recs, 1)]
        yield sid, pd.DataFrame(rows, columns=ANSWERED_COLUMNS)


def iter_session_feedback(answered: Iterable[tuple[int, pd.DataFrame]], user: User, *,
                          domains: Sequence[str], seed: int = 42, persona_scheme: str = "auto",
                          personas: Sequence[Persona] | None = None, batch_sessions: int = 8,
                          model: str = "", source: str = "") -> Iterator[tuple[int, pd.DataFrame]]:
    """The simulated user's half of the sessions: for each answered session ((session_id,
    ANSWERED_COLUMNS frame), as `iter_session_answers` yields them or read back from its
    file), the user with the session's persona replies to every turn; yields (session_id,
    turns) per session, in the given order. Sessions are rendered `batch_sessions` at a time
    (one batched user call).

    domains: the pool's domains (the personas' expertise is drawn from them). personas: one
    per session id, else `make_persona(scheme)`. Rows follow records.TURN_COLUMNS
    (session_id as the string of the 0-based index) plus EXTRA_COLUMNS; `source` defaults to
    "live:<model>:seed<seed>"."""
    source = source or f"live:{model}:seed{seed}"
    domains = sorted(domains)
    answered = iter(answered)
    while block := [(int(s), t) for _, (s, t) in zip(range(max(1, batch_sessions)), answered)]:
        pairs, rows = [], []
        for sid, turns in block:
            if personas is not None and sid >= len(personas):
                raise ValueError(f"no persona for session {sid} ({len(personas)} given)")
            persona = (personas[sid] if personas is not None
                       else make_persona(domains, sid, seed, persona_scheme))
            rng_u = np.random.default_rng([seed, sid, 1])
            for r in turns.to_dict("records"):
                answer = r["answer"] if isinstance(r["answer"], str) else None
                ctx = TurnContext(sid, int(r["turn"]), str(r["question"]), tuple(map(str, r["choices"])),
                                  r["domain"], answer, r["gt_answer"], bool(r["correct"]), persona)
                plan = user.plan(ctx, rng_u)
                pairs.append((ctx, plan))
                rows.append({
                    "model": model, "session_id": str(sid), "turn": int(r["turn"]),
                    "item_id": r["item_id"], "question": r["question"], "domain": r["domain"],
                    "tier": r["tier"], "reference": r["gt_answer"], "answer": answer,
                    "parsed": answer is not None, "abstain": False,
                    "confidence": float(r["confidence"]), "correct": bool(r["correct"]),
                    "feedback_text": None, "decoded_category": None, "decoded_label": np.nan,
                    "in_expertise": ctx.in_expertise, **persona.as_record(),
                    "user_model": _user_name(user), "source": source,
                    "answer_status": r["answer_status"], "feedback_intent": plan.intent,
                    "feedback_kind": plan.kind, "feedback_explicit": _explicit(user, plan),
                })
        texts = user.render(pairs)
        if len(texts) != len(rows):
            raise RuntimeError(f"user rendered {len(texts)} replies for {len(rows)} turns")
        for row, text in zip(rows, texts):
            row["feedback_text"] = text
        df = pd.DataFrame(rows, columns=LIVE_COLUMNS)
        # decoded with the frozen rules at record time, as the importer does (records.py)
        dec = decode_feedback(df["feedback_text"], "frozen")
        df["decoded_category"] = dec["decoded_category"].to_numpy()
        df["decoded_label"] = dec["decoded_label"].to_numpy()
        for sid, _ in block:
            yield sid, df[df["session_id"] == str(sid)].reset_index(drop=True)


def iter_sessions(items: pd.DataFrame, answer_fn: AnswerFn | LM | None, user: User, *,
                  n_sessions: int, n_turns: int = 50, seed: int = 42,
                  tiers: dict[str, str] | None = None,
                  tier_fractions: Sequence[float] = TIER_FRACTIONS,
                  persona_scheme: str = "auto", personas: Sequence[Persona] | None = None,
                  done_session_ids: Iterable[int] = (), batch_sessions: int = 8,
                  model: str = "", source: str = "", answers: pd.DataFrame | None = None,
                  per_turn: bool = False) -> Iterator[tuple[int, pd.DataFrame]]:
    """Run the sessions not in `done_session_ids` in one process: `iter_session_answers`
    then `iter_session_feedback` (see both for the arguments); yield (session_id, turns) per
    session, in session order."""
    if personas is not None and len(personas) < n_sessions:
        raise ValueError(f"{len(personas)} personas for {n_sessions} sessions")
    answered = iter_session_answers(items, answer_fn, n_sessions=n_sessions, n_turns=n_turns,
                                    seed=seed, tiers=tiers, tier_fractions=tier_fractions,
                                    done_session_ids=done_session_ids, answers=answers,
                                    per_turn=per_turn)
    yield from iter_session_feedback(answered, user, domains=items["domain"].unique(), seed=seed,
                                     persona_scheme=persona_scheme, personas=personas,
                                     batch_sessions=batch_sessions, model=model, source=source)


def _user_name(user: User) -> str:
    """records.py's `user_model`: the simulating LM's id, or "rules"."""
    lm = getattr(user, "lm", None)
    return str(lm.model_id) if lm is not None else "rules"


def _explicit(user: User, plan) -> object:
    """Whether the reply uses stock verdict words (rule user only; unknown for an LLM)."""
    return (plan.kind in EXPLICIT_KINDS) if isinstance(user, RuleBasedUser) else None


def complete_sessions(turns: pd.DataFrame | None, n_turns: int) -> set[int]:
    """Session ids of `turns` that hold all turns 1..n_turns."""
    if turns is None or turns.empty:
        return set()
    want = set(range(1, n_turns + 1))
    g = turns.groupby("session_id")["turn"].agg(lambda s: set(map(int, s)) == want)
    return set(int(s) for s in g.index[g.values])


def run_sessions(items: pd.DataFrame, answer_fn: AnswerFn | LM | None, user: User, *,
                 n_sessions: int, n_turns: int = 50, seed: int = 42,
                 existing: pd.DataFrame | None = None, **kwargs) -> pd.DataFrame:
    """All sessions as one turn frame (LIVE_COLUMNS), sorted by session and turn. Complete sessions in `existing` are kept as they are and not recomputed."""
    done = complete_sessions(existing, n_turns)
    parts = ([existing[existing["session_id"].astype(int).isin(done)][LIVE_COLUMNS]]
             if done else [])
    parts += [df for _, df in iter_sessions(items, answer_fn, user, n_sessions=n_sessions,
                                            n_turns=n_turns, seed=seed,
                                            done_session_ids=done, **kwargs)]
    if not parts:
        return pd.DataFrame(columns=LIVE_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    return _sort(out[out["session_id"].astype(int) < n_sessions])


def _sort(df: pd.DataFrame) -> pd.DataFrame:
    key = df["session_id"].astype(int)
    return (df.assign(_k=key).sort_values(["_k", "turn"]).drop(columns="_k")
            .reset_index(drop=True))


def write_session_chunks(out_dir: str | Path, n_sessions: int,
                         sessions: Callable[[set[int]], Iterable[tuple[int, pd.DataFrame]]]) -> list[Path]:
    """Resumable run: one parquet chunk `session_NNNN.parquet` per session of
    `sessions(done_session_ids)`, written atomically as soon as it is yielded; sessions whose
    chunk exists are passed as done. Returns the chunk paths of sessions 0..n_sessions-1."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = lambda s: out_dir / f"session_{s:04d}.parquet"  # noqa: E731
    done = {s for s in range(n_sessions) if path(s).is_file()}
    for sid, df in sessions(done):
        write_parquet(df, path(sid))
        log.info("session %d written (%d turns)", sid, len(df))
    return [path(s) for s in range(n_sessions)]


def run_sessions_to_dir(out_dir: str | Path, items: pd.DataFrame,
                        answer_fn: AnswerFn | LM | None, user: User, *, n_sessions: int,
                        n_turns: int = 50, seed: int = 42, **kwargs) -> list[Path]:
    """`iter_sessions` as a resumable run (`write_session_chunks`), one chunk per session,
    written as soon as the session's batch is rendered."""
    return write_session_chunks(out_dir, n_sessions, lambda done: iter_sessions(
        items, answer_fn, user, n_sessions=n_sessions, n_turns=n_turns, seed=seed,
        done_session_ids=done, **kwargs))


def read_session_chunks(paths: Iterable[str | Path], columns: Sequence[str] = LIVE_COLUMNS) -> pd.DataFrame:
    """Concatenate per-session chunks into one turn frame sorted by session and turn."""
    frames = [pd.read_parquet(p) for p in paths]
    if not frames:
        return pd.DataFrame(columns=list(columns))
    return _sort(pd.concat(frames, ignore_index=True))
