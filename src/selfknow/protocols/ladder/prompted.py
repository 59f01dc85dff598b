"""The prompted LADDER levels: L1 ZS prior, L2 LSA, L4 GT-SelfStats (paper §3, §C.1, §C.2,
§G.3, §I.3; SPEC §2 "The five levels").

* L1 `zs_prior`: the model, with no history, gives its expected accuracy per domain.
* L2 `lsa_profiles`: the model reads its session history (question, its answer and confidence,
  the user's reply) and gives per-domain accuracies.
* L4 `gt_selfstats_profiles`: the model is handed its session's empirical per-domain results
  and asked to report them back.

Two prompt modes. "json" (default, the paper: one domain-indexed JSON profile per call,
prompts/{zs_prior,lsa,gt_selfstats}.txt; the reply is constrained to `profile_schema` where the
model entry has `structured_output` on). "per_domain" (the authors' released code,
`capbound_baselines_v4.py`: one call per domain, "Reply with ONLY a single integer between 0
and 100", prompts/*_domain.txt; LSA there sees only that domain's turns and needs >= 2).

Parsing (`parse_profile`): the first {...} block, tolerant of surrounding prose, fences,
quotes, percentages ("70%", 70, "0.7"); keys matched to domains case/space/underscore-
insensitively; if no JSON object, "domain: number" pairs are recovered by regex. Values are
clipped to `clip` (default [0, 1]; the authors clip to [0.01, 0.99]). A domain with no usable
value gets `default` (0.5, the authors' fallback) and `filled=True`; the session's
`parse_status` is "ok", "partial" (some filled), "regex" / "regex_partial" (no JSON object,
pairs recovered) or "unparsable" (all filled). Nothing is dropped.

Profiles cover a session's eligible domains: at least `min_answers` (2) scored turns.

Per-turn query confidence (paper: Platt/HistBin differ from UF-PDC only in it): for ZS and
GT-SelfStats the authors' baselines return the recorded answer confidence; for LSA they ask the
model, once at least 3 earlier turns exist, for its probability of answering the next question
correctly given the last 10 turns (`lsa_query_confidence`, prompts/lsa_query.txt), else the
recorded confidence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.models.base import LM
from selfknow.protocols.ladder.answering import (_NUM, iter_json_objects, load_prompt,
                                                 parse_probability)

PROFILE_COLUMNS = ["model", "method", "session_id", "domain", "p_hat", "filled", "parse_status",
                   "raw_response"]
#: session_id of a model-level profile (the ZS prior is asked once per model)
MODEL_LEVEL = "*"
DEFAULT_P = 0.5
MIN_ANSWERS = 2


# ----------------------------------------------------------------------------- parsing
def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")


def _value(v: object) -> float | None:
    if isinstance(v, dict):  # {"accuracy": 0.7} and the like
        for x in v.values():
            p = _value(x)
            if p is not None:
                return p
        return None
    return parse_probability(v)


@dataclass
class ProfileParse:
    values: dict[str, float]
    filled: set[str] = field(default_factory=set)
    status: str = "ok"


def parse_profile(text: str | None, domains: Sequence[str], *, default: float = DEFAULT_P,
                  clip: tuple[float, float] = (0.0, 1.0)) -> ProfileParse:
    """Per-domain probabilities from a JSON-profile reply (see module docstring)."""
    want = {_norm(d): d for d in domains}
    found: dict[str, float] = {}
    via_regex = False
    # the first object naming any requested domain (an echoed format hint like
    # {domain: prob} before the answer is skipped)
    for obj in iter_json_objects(text):
        for k, v in obj.items():
            d = want.get(_norm(k))
            p = _value(v)
            if d is not None and p is not None and d not in found:
                found[d] = p
        if found:
            break
    if not found and text:
        for d in domains:
            words = r"[\s_\-]+".join(map(re.escape, re.split(r"[\s_]+", d)))
            m = re.search(rf"{words}\W{{0,4}}[:=\-]\s*({_NUM}\s*%?)", text, re.IGNORECASE)
            p = parse_probability(m.group(1)) if m else None
            if p is not None:
                found[d] = p
        via_regex = bool(found)
    lo, hi = clip
    values = {d: float(np.clip(found.get(d, default), lo, hi)) for d in domains}
    filled = {d for d in domains if d not in found}
    if not found:
        status = "unparsable"
    elif via_regex:
        status = "regex_partial" if filled else "regex"
    else:
        status = "partial" if filled else "ok"
    return ProfileParse(values, filled, status)


def parse_single(text: str | None, *, default: float = DEFAULT_P,
                 clip: tuple[float, float] = (0.0, 1.0)) -> tuple[float, bool]:
    """(probability, parsed?) from a reply to a "single integer 0-100" prompt: the first
    number, read as a percentage when > 1."""
    m = re.search(rf"{_NUM}\s*%?", text or "")
    p = parse_probability(m.group(0)) if m else None
    ok = p is not None
    return float(np.clip(p if ok else default, *clip)), ok


# ----------------------------------------------------------------------------- helpers
def eligible_domains(session: pd.DataFrame, min_answers: int = MIN_ANSWERS) -> list[str]:
    """Domains of one session with at least `min_answers` scored turns, sorted."""
    n = session.groupby("domain").size()
    return sorted(n.index[n >= min_answers])


def _domain_list(domains: Sequence[str]) -> str:
    return "\n".join(f"- {d}" for d in domains)


def profile_schema(domains: Sequence[str]) -> dict:
    """The JSON schema of a profile reply: every domain (in the prompt's order) mapped to a
    probability, no other key. Given to `generate` in json mode: a model entry with
    `structured_output` on replies within it (LM.generate)."""
    return {"type": "object",
            "properties": {d: {"type": "number", "minimum": 0, "maximum": 1} for d in domains},
            "required": list(domains), "additionalProperties": False}


def generate_texts(lm: LM, prompts: list[str], max_new_tokens: int, batch_size: int,
                   chat: bool, schemas: list[dict] | None = None) -> list[str]:
    """Greedy replies to `prompts`, `batch_size` at a time, each held to its JSON schema when
    `schemas` is given."""
    out: list[str] = []
    for s in range(0, len(prompts), batch_size):
        gens = lm.generate(prompts[s:s + batch_size], max_new_tokens=max_new_tokens,
                           chat=chat, temperature=0.0,
                           json_schemas=None if schemas is None else schemas[s:s + batch_size])
        out.extend(g.text for g in gens)
    return out


def _clip_text(s: object, n: int) -> str:
    s = str(s or "").replace("\n", " ").strip()
    return s if len(s) <= n else s[:n] + "..."


def _sessions(turns: pd.DataFrame):
    """(model, session_id, that session's turns in turn order) for every session."""
    for c in ("session_id", "turn", "domain", "question", "correct"):
        if c not in turns.columns:
            raise ValueError(f"session turns lack column {c!r}")
    if turns.empty:
        return
    model = (turns["model"].astype(str) if "model" in turns.columns
             else pd.Series("", index=turns.index))
    key = turns["session_id"].astype(str)
    # numeric ids in numeric order ("2" before "10"), like the session engine writes them
    order = model + "\x1f" + key.str.zfill(int(key.str.len().max() or 1))
    df = turns.assign(_k=order, _m=model).sort_values(["_k", "turn"])
    for _, g in df.groupby("_k", sort=False):
        yield str(g["_m"].iloc[0]), str(g["session_id"].iloc[0]), g.drop(columns=["_k", "_m"])


def _rows(method: str, model: str, sid: str, pp: ProfileParse, raw: str | None) -> list[dict]:
    return [{"model": model, "method": method, "session_id": sid, "domain": d, "p_hat": p,
             "filled": d in pp.filled, "parse_status": pp.status, "raw_response": raw}
            for d, p in pp.values.items()]


def _per_domain_rows(method: str, model: str, sid: str, domains: Sequence[str],
                     replies: Sequence[str], default: float, clip) -> list[dict]:
    vals, filled = {}, set()
    for d, r in zip(domains, replies):
        vals[d], ok = parse_single(r, default=default, clip=clip)
        if not ok:
            filled.add(d)
    status = ("unparsable" if domains and len(filled) == len(domains)
              else "partial" if filled else "ok")
    pp = ProfileParse(vals, filled, status)
    raw = {d: r for d, r in zip(domains, replies)}
    return [{**row, "raw_response": raw[row["domain"]]}
            for row in _rows(method, model, sid, pp, None)]


# ----------------------------------------------------------------------------- L1
def zs_prior(lm: LM, domains: Sequence[str], *, model: str = "", mode: str = "json",
             max_new_tokens: int = 200, chat: bool = True, default: float = DEFAULT_P,
             clip: tuple[float, float] = (0.0, 1.0)) -> pd.DataFrame:
    """L1 ZS prior: one zero-shot profile over `domains` for the model (session_id "*");
    `zs_prior_profiles` spreads it over the sessions."""
    domains = sorted(domains)
    if mode == "json":
        t = load_prompt("zs_prior").substitute(domain_list=_domain_list(domains),
                                               example_domain=domains[0])
        reply = generate_texts(lm, [t], max_new_tokens, 1, chat, [profile_schema(domains)])[0]
        rows = _rows("zs_prior", model, MODEL_LEVEL, parse_profile(reply, domains, default=default, clip=clip),
                     reply)
    elif mode == "per_domain":
        tm = load_prompt("zs_prior_domain")
        replies = generate_texts(lm, [tm.substitute(domain=d.replace("_", " ")) for d in domains],
                            max_new_tokens, 16, chat)
        rows = _per_domain_rows("zs_prior", model, MODEL_LEVEL, domains, replies, default, clip)
    else:
        raise ValueError(f"unknown mode {mode!r}: 'json' or 'per_domain'")
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


def zs_prior_profiles(prior: pd.DataFrame, turns: pd.DataFrame,
                      min_answers: int = MIN_ANSWERS) -> pd.DataFrame:
    """The model-level ZS prior restricted to each session's eligible domains (`prior` is one
    model's; its sessions are those of `turns`)."""
    p = prior.set_index("domain")
    rows = []
    for model, sid, g in _sessions(turns):
        for d in eligible_domains(g, min_answers):
            if d not in p.index:
                raise ValueError(f"ZS prior has no domain {d!r} (session {sid})")
            r = p.loc[d]
            rows.append({"model": model, "method": "zs_prior", "session_id": sid, "domain": d,
                         "p_hat": float(r["p_hat"]), "filled": bool(r["filled"]),
                         "parse_status": r["parse_status"], "raw_response": r["raw_response"]})
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


# ----------------------------------------------------------------------------- L2 LSA
def lsa_history(session: pd.DataFrame, question_chars: int = 80,
                feedback_chars: int = 120) -> str:
    """One line per turn: domain, question (truncated as the authors do), answer, confidence,
    the user's reply."""
    lines = []
    for r in session.itertuples(index=False):
        ans = r.answer if isinstance(r.answer, str) and r.answer else "no answer"
        lines.append(f"{r.turn}. (Domain: {r.domain}) Question: "
                     f"\"{_clip_text(r.question, question_chars)}\" Your answer: {ans} "
                     f"(confidence {float(r.confidence):.2f}). User reaction: "
                     f"\"{_clip_text(r.feedback_text, feedback_chars)}\"")
    return "\n".join(lines)


def lsa_profiles(lm: LM, turns: pd.DataFrame, *, mode: str = "json",
                 max_new_tokens: int = 200, chat: bool = True, batch_size: int = 8,
                 min_answers: int = MIN_ANSWERS, question_chars: int = 80,
                 feedback_chars: int = 120, default: float = DEFAULT_P,
                 clip: tuple[float, float] = (0.0, 1.0)) -> pd.DataFrame:
    """L2 LSA: one profile per session from the model reading that session's history."""
    sessions = [(m, sid, g, eligible_domains(g, min_answers)) for m, sid, g in _sessions(turns)]
    rows: list[dict] = []
    if mode == "json":
        t = load_prompt("lsa")
        todo = [(m, sid, doms,
                 t.substitute(history=lsa_history(g, question_chars, feedback_chars),
                              domain_list=_domain_list(doms), example_domain=doms[0]))
                for m, sid, g, doms in sessions if doms]
        replies = generate_texts(lm, [p for *_, p in todo], max_new_tokens, batch_size, chat,
                            [profile_schema(doms) for _, _, doms, _ in todo])
        for (m, sid, doms, _), reply in zip(todo, replies):
            rows += _rows("lsa", m, sid, parse_profile(reply, doms, default=default, clip=clip),
                          reply)
    elif mode == "per_domain":
        tm = load_prompt("lsa_domain")
        for m, sid, g, doms in sessions:
            prompts = []
            for d in doms:
                gd = g[g["domain"] == d]
                hist = "\n".join(
                    f"{i}. Your question: \"{_clip_text(q, question_chars)}\"\n"
                    f"   User response: \"{_clip_text(f, feedback_chars)}\""
                    for i, (q, f) in enumerate(zip(gd["question"], gd["feedback_text"]), 1))
                prompts.append(tm.substitute(domain=d.replace("_", " "), history=hist))
            replies = generate_texts(lm, prompts, max_new_tokens, batch_size, chat)
            rows += _per_domain_rows("lsa", m, sid, doms, replies, default, clip)
    else:
        raise ValueError(f"unknown mode {mode!r}: 'json' or 'per_domain'")
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


# ----------------------------------------------------------------------------- L4
def session_stats(session: pd.DataFrame, min_answers: int = MIN_ANSWERS) -> pd.DataFrame:
    """Eligible domains of one session with n_correct, n_total, accuracy (the L3 target)."""
    g = session.groupby("domain")["correct"].agg(n_correct="sum", n_total="size")
    g = g[g["n_total"] >= min_answers].sort_index()
    g["accuracy"] = g["n_correct"] / g["n_total"]
    return g.reset_index()


def gt_selfstats_profiles(lm: LM, turns: pd.DataFrame, *, mode: str = "json",
                          max_new_tokens: int = 200, chat: bool = True, batch_size: int = 8,
                          min_answers: int = MIN_ANSWERS, default: float = DEFAULT_P,
                          clip: tuple[float, float] = (0.0, 1.0)) -> pd.DataFrame:
    """L4 GT-SelfStats: the model is given its session's per-domain results (counts and
    accuracy) and asked to report its per-domain accuracy back."""
    rows: list[dict] = []
    stats = [(m, sid, session_stats(g, min_answers)) for m, sid, g in _sessions(turns)]
    if mode == "json":
        t = load_prompt("gt_selfstats")
        todo = []
        for m, sid, st in stats:
            if st.empty:
                continue
            text = "\n".join(
                f"- {r.domain}: you answered {int(r.n_correct)} out of {int(r.n_total)} "
                f"questions correctly (accuracy {r.accuracy:.2f})"
                for r in st.itertuples(index=False))
            todo.append((m, sid, list(st["domain"]),
                         t.substitute(stats=text, example_domain=st["domain"].iloc[0])))
        replies = generate_texts(lm, [p for *_, p in todo], max_new_tokens, batch_size, chat,
                            [profile_schema(doms) for _, _, doms, _ in todo])
        for (m, sid, doms, _), reply in zip(todo, replies):
            rows += _rows("gt_selfstats", m, sid,
                          parse_profile(reply, doms, default=default, clip=clip), reply)
    elif mode == "per_domain":
        tm = load_prompt("gt_selfstats_domain")
        for m, sid, st in stats:
            prompts = [tm.substitute(domain=r.domain.replace("_", " "),
                                     n_correct=int(r.n_correct), n_total=int(r.n_total))
                       for r in st.itertuples(index=False)]
            replies = generate_texts(lm, prompts, max_new_tokens, batch_size, chat)
            rows += _per_domain_rows("gt_selfstats", m, sid, list(st["domain"]), replies,
                                     default, clip)
    else:
        raise ValueError(f"unknown mode {mode!r}: 'json' or 'per_domain'")
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


# ----------------------------------------------------------------------------- per turn
def lsa_query_confidence(lm: LM, turns: pd.DataFrame, *, window: int = 10,
                         min_history: int = 3, max_new_tokens: int = 10, chat: bool = True,
                         batch_size: int = 16, question_chars: int = 80,
                         feedback_chars: int = 100, clip: tuple[float, float] = (0.01, 0.99),
                         ) -> pd.DataFrame:
    """LSA's per-turn query confidence (the authors' `LLMSelfAssess.predict_confidence`):
    from the last `window` turns' (domain, question, user reaction) and the next question, the
    model's probability (0-100) of answering it correctly; the recorded answer confidence when
    fewer than `min_history` earlier turns exist or the reply has no number. Returns
    model, session_id, turn, query_confidence, query_status ("model" | "recorded" | "unparsable")."""
    tmpl = load_prompt("lsa_query")
    rows, prompts, where = [], [], []
    for m, sid, g in _sessions(turns):
        recs = g.to_dict("records")
        for k, r in enumerate(recs):
            row = {"model": m, "session_id": sid, "turn": int(r["turn"]),
                   "query_confidence": float(r["confidence"]), "query_status": "recorded"}
            if k >= min_history:
                hist = "\n".join(
                    f"- (Domain: {h['domain']}) Question: "
                    f"{_clip_text(h['question'], question_chars)} User reaction: "
                    f"{_clip_text(h['feedback_text'], feedback_chars)}"
                    for h in recs[max(0, k - window):k])
                prompts.append(tmpl.substitute(history=hist, domain=r["domain"],
                                               question=_clip_text(r["question"], 200)))
                where.append(len(rows))
            rows.append(row)
    replies = generate_texts(lm, prompts, max_new_tokens, batch_size, chat)
    for i, reply in zip(where, replies):
        p, ok = parse_single(reply, clip=clip)
        if ok:
            rows[i]["query_confidence"], rows[i]["query_status"] = p, "model"
        else:
            rows[i]["query_status"] = "unparsable"
    return pd.DataFrame(rows, columns=["model", "session_id", "turn", "query_confidence",
                                       "query_status"])
