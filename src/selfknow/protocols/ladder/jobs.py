"""The LADDER protocol's workflow jobs (SPEC §2): each reads its inputs, computes, writes
atomically, and returns a summary dict for the job log.

Per answering model (its last checkpoint):
* `answers_job`    the item pool (n per domain) and the model's answers to every session's
                   questions (base LM: cloze scoring of the options; chat/API model:
                   `ladder.answer_format`, a fresh call per turn with `answer_per_turn`). It
                   loads the answering model only: a local model's GPU job makes no request
                   to an API user. Resumable: one chunk per session under `parts_dir`.
* `sessions_job`   the simulated user's replies to those answers: `n_sessions` sessions with
                   the configured user, and the first `alt_sessions` sessions again with the
                   other user (rule <-> LLM) for the simulator comparison (§E.8-§E.9). It
                   loads the LLM user only. Resumable: one chunk per session under `parts_dir`.
* `prompted_job`   the prompted levels read by `prompted_model` (the model itself when it is a
                   chat model): L1 ZS prior, L2 LSA (+ clean-label LSA, train-half LSA for
                   held-out prediction, per-turn LSA query confidence), L4 GT-SelfStats.
* `score_job`      every estimator and control on the recorded sessions (no model call).
Then `tables.write_tables` assembles every table and figure from all models' score parts.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.config import is_chat
from selfknow.models import load_lm
from selfknow.stages.items import sample_items
from selfknow.records import read_parquet, write_json, write_parquet

from . import controls as C
from .aggregate import OFFLINE_ESTIMATORS, score_pooled, score_sessions, with_decoded_labels
from .answering import AUTHORS_TIMEOUT_S, FAILED_CALL_POLICIES, make_answer_fn
from .bootstrap import paired_cluster_bootstrap, session_bootstrap
from .catalog import SCORE_PARTS
from .estimators import Stream, fit_estimator, resolve
from .feedback import decoder_precision_recall
from .metrics import answer_metrics, profile_metrics
from .prompted import (MODEL_LEVEL, PROFILE_COLUMNS, gt_selfstats_profiles, lsa_profiles,
                       lsa_query_confidence, zs_prior, zs_prior_profiles)
from .session import (ANSWERED_COLUMNS, iter_session_answers, iter_session_feedback,
                      read_session_chunks, write_session_chunks)
from .simulators import make_user

log = logging.getLogger(__name__)

#: level of every scored method (paper §3, §C.1): the five-level ladder
LEVELS = {"NoMemory": "L0", "ZS": "L1", "LSA": "L2", "Global": "L2", "Count": "L2",
          "UF-PDC": "L2", "Bayes-Domain": "L2", "Platt-Online": "L2", "HistBin-Online": "L2",
          "Dawid-Skene": "L2", "GLAD": "L2", "EM-Joint": "L2", "OraclePDC": "L3",
          "GT-SelfStats": "L4"}
#: prompted method (prompted.py) -> estimator name in the tables
PROMPTED = {"zs_prior": "ZS", "lsa": "LSA", "gt_selfstats": "GT-SelfStats"}
#: what the clean-label LSA control shows the model instead of the user's reply (§E.5)
CLEAN_FEEDBACK = ("That is correct.", "That is incorrect.")
QUERY_COLUMNS = ["model", "session_id", "turn", "query_confidence", "query_status"]
TIER_ESTIMATORS = ["NoMemory", "ZS", "Global", "Count", "Bayes-Domain", "OraclePDC"]
HELDOUT_ESTIMATORS = ["NoMemory", "Global", "Count", "Bayes-Domain", "EM-Joint"]


# ============================================================================= sessions
def _fresh_parts(parts_dir: Path, fingerprint: dict) -> None:
    """Keep resumable chunks only if they were made with the same settings."""
    stamp = parts_dir / "params.json"
    if parts_dir.exists():
        try:
            same = json.loads(stamp.read_text()) == json.loads(json.dumps(fingerprint, sort_keys=True,
                                                                           default=str))
        except (OSError, ValueError):
            same = False
        if not same:
            log.info("%s: settings changed, discarding old session chunks", parts_dir)
            shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    write_json(fingerprint, stamp)


def _pool(items_path: str, items_per_domain: int, seed: int) -> pd.DataFrame:
    """The sessions' question pool: `items_per_domain` MCQ test items per domain, seeded."""
    pool = sample_items(read_parquet(items_path), items_per_domain, seed, stratify="domain")
    if pool["choices"].isna().any():
        raise ValueError(f"{items_path}: LADDER needs multiple-choice items; some rows have no choices")
    return pool


def answers_job(items_path: str, spec: dict, out: str, *, n_sessions: int, alt_sessions: int,
                n_turns: int, items_per_domain: int, seed: int, parts_dir: str, cache_dir: str | None,
                answering: Mapping | None = None, tiers: Mapping[str, Sequence[str]] | None = None) -> dict:
    """One answering model's (its last checkpoint) answers to the questions of sessions
    0..max(n_sessions, alt_sessions) - 1, written to `out` (session.ANSWERED_COLUMNS), see the
    module docstring.

    items_path: the MCQ test items; the pool is `items_per_domain` per domain, seeded.
    answering: a chat model's `ladder` answer settings {format, temperature, max_new_tokens,
    per_turn, failed_call} (a base LM answers by cloze, once per item); `failed_call`
    "authors" sends an openai-backend model's answer calls with the authors' one 30 s try. tiers: {strong, mid, weak:
    [domains]} (the authors' profile), else from the pool's answers."""
    pool = _pool(items_path, items_per_domain, seed)
    failed_call = (answering or {}).get("failed_call", FAILED_CALL_POLICIES[0])
    if failed_call == "authors" and spec["backend"] == "openai":
        spec = {**spec, "timeout_s": AUTHORS_TIMEOUT_S, "max_retries": 0}  # their one 30 s try
    lm = load_lm(spec, None, cache_dir=cache_dir)
    if is_chat(spec):
        if answering is None:
            raise ValueError(f"model '{spec['name']}' is a chat model: pass the ladder answer settings")
        mode, per_turn = answering["format"], bool(answering["per_turn"])
        answer_fn = make_answer_fn(lm, mode, temperature=float(answering["temperature"]),
                                   max_new_tokens=int(answering["max_new_tokens"]),
                                   failed_call=failed_call)
    else:
        mode, per_turn, answer_fn = "cloze", False, make_answer_fn(lm, "cloze")
    tier_of = None if tiers is None else {d: t for t in ("strong", "mid", "weak") for d in tiers[t]}
    answers = None if per_turn else answer_fn(pool)
    parts = Path(parts_dir)
    _fresh_parts(parts, {"model": spec["name"], "identity": lm.identity(), "items": str(items_path),
                         "n_turns": n_turns, "per_domain": items_per_domain, "seed": seed, "mode": mode,
                         "answering": None if mode == "cloze" else dict(answering), "tiers": tier_of})
    n = max(n_sessions, alt_sessions)
    paths = write_session_chunks(parts, n, lambda done: iter_session_answers(
        pool, answer_fn, n_sessions=n, n_turns=n_turns, seed=seed, answers=answers, tiers=tier_of,
        per_turn=per_turn, done_session_ids=done))
    answered = read_session_chunks(paths, ANSWERED_COLUMNS)
    write_parquet(answered, out)
    main = answered[answered["session_id"] < n_sessions]
    return {"pool": len(pool), "answer_mode": mode, "per_turn": per_turn, "sessions": n,
            "accuracy": round(float(main["correct"].astype(bool).mean()), 4) if len(main) else None,
            "unparsed_answers": int((main["answer_status"] == "unparsed").sum()),
            "failed_answer_calls": int((answered["answer_status"] == "error").sum()),
            "model_calls": lm.stats.misses, "cache_hits": lm.stats.hits}


def sessions_job(answers_path: str, items_path: str, out_main: str, out_alt: str, *, model: str,
                 n_sessions: int, n_turns: int, items_per_domain: int, seed: int, user: str,
                 alt_sessions: int, user_spec: dict | None, parts_dir: str, cache_dir: str | None,
                 user_max_new_tokens: int) -> dict:
    """The simulated users' replies to answering model `model`'s answered sessions
    (`answers_job`'s output), see the module docstring.

    user: "rule" or "llm" for the main sessions; the alternative user ("llm" when the main
    one is "rule", else "rule") replays sessions 0..alt_sessions-1 with the same questions,
    personas and answers. user_spec: the LLM user's model spec (needed when either user is
    "llm"), user_max_new_tokens its reply budget. items_path, items_per_domain: the pool
    `answers_job` drew from, whose domains the personas' expertise is drawn from."""

    answered = read_parquet(answers_path)
    by_session = {int(s): g for s, g in answered.groupby("session_id", sort=True)}
    domains = _pool(items_path, items_per_domain, seed)["domain"].unique()
    alt = "llm" if user == "rule" else "rule"
    user_lm = None
    if "llm" in (user, alt if alt_sessions else user):
        if user_spec is None:
            raise ValueError("the LLM-simulated user needs ladder.llm_user_model")
        user_lm = load_lm(user_spec, None, cache_dir=cache_dir)
    # a rerun over other answers (new weights, settings or seed upstream) must not keep replies
    answers_digest = hashlib.sha256(Path(answers_path).read_bytes()).hexdigest()[:16]
    parts = Path(parts_dir)
    written = {}
    for kind, n, out, sub in ((user, n_sessions, out_main, "main"), (alt, alt_sessions, out_alt, "alt")):
        if n == 0:
            written[sub] = read_session_chunks([])
            write_parquet(written[sub], out)
            continue
        d = parts / sub
        _fresh_parts(d, {"model": model, "answers": answers_digest, "user": kind,
                         "user_model": None if kind == "rule" else user_lm.identity()})
        missing = [s for s in range(n) if len(by_session.get(s, ())) != n_turns]
        if missing:
            raise ValueError(f"{answers_path}: session {missing[0]} has "
                             f"{len(by_session.get(missing[0], ()))} answered turns, {n_turns} expected")
        u = make_user(kind, user_lm, max_new_tokens=user_max_new_tokens) if kind == "llm" else make_user(kind)
        paths = write_session_chunks(d, n, lambda done: iter_session_feedback(
            ((s, by_session[s]) for s in range(n) if s not in done), u, domains=domains, seed=seed,
            model=model))
        turns = read_session_chunks(paths)
        write_parquet(turns, out)
        written[sub] = turns
    main = written["main"]
    return {"turns_main": len(main), "turns_alt": len(written["alt"]),
            "model_calls_user": user_lm.stats.misses if user_lm else 0,
            "cache_hits_user": user_lm.stats.hits if user_lm else 0}


# ============================================================================= prompted
def clean_feedback_turns(turns: pd.DataFrame) -> pd.DataFrame:
    """Turns whose user reply is replaced by an explicit verdict of the true outcome (the
    clean-label control of LSA, paper §E.5)."""
    ok, bad = CLEAN_FEEDBACK
    return turns.assign(feedback_text=np.where(turns["correct"].astype(bool), ok, bad))


def _first_sessions(turns: pd.DataFrame, k: int) -> pd.DataFrame:
    ids = sorted(turns["session_id"].astype(str).unique(), key=lambda s: (len(s), s))[:max(0, k)]
    return turns[turns["session_id"].astype(str).isin(ids)]


def prompted_job(turns_path: str, spec: dict, out_profiles: str, out_query: str, *, model: str,
                 mode: str = "json", max_new_tokens: int = 200, lsa_query_sessions: int = 0,
                 prompted_sessions: int = 0, lsa_controls: bool = True, seed: int = 42,
                 cache_dir: str | None = None) -> dict:
    """The prompted levels of one answering model's sessions, asked of `spec`'s model (last
    checkpoint; chat rendering when it is a chat model).

    Profiles (prompted.PROFILE_COLUMNS; unparsable replies kept with 0.5 and counted):
    zs_prior (model level, session_id "*", and spread over the sessions), lsa, lsa_clean
    (histories with clean verdicts), lsa_train (each session's train-half turns, for
    held-out prediction) and gt_selfstats. Query confidences: LSA's per-turn probability for
    the first `lsa_query_sessions` sessions. `prompted_sessions` > 0 asks LSA / GT-SelfStats
    for the first sessions only (the ZS prior covers every session); `lsa_controls` False
    skips lsa_clean and lsa_train (each one more call per session)."""
    turns = read_parquet(turns_path)
    if turns.empty:
        raise ValueError(f"{turns_path}: no session turns")
    lm = load_lm(spec, None, cache_dir=cache_dir)
    chat = is_chat(spec)
    kw = dict(mode=mode, max_new_tokens=max_new_tokens, chat=chat)
    prior = zs_prior(lm, sorted(turns["domain"].astype(str).unique()), model=model, **kw)
    asked = _first_sessions(turns, prompted_sessions) if prompted_sessions else turns
    parts = [prior, zs_prior_profiles(prior, turns), lsa_profiles(lm, asked, **kw),
             gt_selfstats_profiles(lm, asked, **kw)]
    if lsa_controls:
        is_train = C.heldout_split(turns, seed)[turns.index.get_indexer(asked.index)]
        parts += [lsa_profiles(lm, clean_feedback_turns(asked), **kw).assign(method="lsa_clean"),
                  lsa_profiles(lm, asked[is_train], **kw).assign(method="lsa_train")]
    prof = pd.concat([p for p in parts if len(p)], ignore_index=True)[PROFILE_COLUMNS]
    prof["model"] = model
    write_parquet(prof, out_profiles)
    if lsa_query_sessions > 0:
        q = lsa_query_confidence(lm, _first_sessions(turns, lsa_query_sessions), chat=chat)
        q["model"] = model
    else:  # prompted.lsa_query_confidence cannot take an empty frame
        q = pd.DataFrame(columns=QUERY_COLUMNS)
    write_parquet(q, out_query)
    per_session = prof.drop_duplicates(["method", "session_id"])
    unpars = {m: int((g == "unparsable").sum()) for m, g in per_session.groupby("method")["parse_status"]}
    return {"profiles": int(len(per_session)), "unparsable": dict(unpars),
            "query_turns": int((q["query_status"] != "recorded").sum()),
            "model_calls": lm.stats.misses, "cache_hits": lm.stats.hits}


# ============================================================================= scoring
def prompted_session_scores(turns: pd.DataFrame, profiles: pd.DataFrame,
                            query: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-session metrics of the prompted levels (ZS, LSA, GT-SelfStats, and LSA on clean
    feedback as "LSA-clean"): profile metrics against the session's eligible domains, answer
    metrics of the query confidences (recorded answer confidence for ZS / GT-SelfStats as the
    authors' baselines, hence equal for the two; LSA's asked confidence where `query` has the
    session, else NaN; none for LSA-clean), and
    whether the session's reply was unparsable (`unparsable`, 0/1) or partly filled."""
    names = {**PROMPTED, "lsa_clean": "LSA-clean"}
    prof = profiles[profiles["session_id"].astype(str) != MODEL_LEVEL]
    qi = {} if query is None or query.empty else {
        (str(m), str(s)): g.set_index("turn")["query_confidence"]
        for (m, s), g in query.groupby(["model", "session_id"])}
    pi = {k: g for k, g in prof.groupby(["model", prof["session_id"].astype(str), "method"])}
    rows = []
    for model, sid, g in C._session_groups(turns):
        dom, y = g["domain"].astype(str).to_numpy(), g["correct"].astype(bool).to_numpy()
        for method, est in names.items():
            p = pi.get((model, sid, method))
            if p is None:
                continue
            r = {"model": model, "session_id": sid, "estimator": est,
                 **profile_metrics(dict(zip(p["domain"], p["p_hat"])), dom, y)}
            if method == "lsa":
                q = qi.get((model, sid))
                conf = None if q is None else q.reindex(g["turn"].astype(int)).to_numpy(float)
            elif method == "lsa_clean":
                # LSA's turn confidences are its own queries on the observed history; none are
                # asked on the clean one (the paper's Table 24 has its CBF only), and the
                # recorded answer confidence would pass for them
                conf = None
            else:
                conf = g["confidence"].astype(float).to_numpy()
            if conf is not None and not np.isnan(conf).any():
                r.update(answer_metrics(conf, y))
            r.update({"n_turns": float(len(g)), "n_labels": np.nan,
                      "unparsable": float((p["parse_status"] == "unparsable").any()),
                      "filled_share": float(p["filled"].mean())})
            rows.append(r)
    return pd.DataFrame(rows)


def _algorithmic_scores(turns: pd.DataFrame, estimators: Sequence[str], latent_query: bool,
                        rules: str) -> pd.DataFrame:
    """`score_sessions` for every estimator; with `latent_query` False the refit-per-turn
    latent models (Dawid-Skene, GLAD) are scored on their profiles only (answer metrics NaN)."""
    names = [resolve(e) for e in estimators]
    latent = [] if latent_query else [e for e in names if e in ("Dawid-Skene", "GLAD")]
    rest = [e for e in names if e not in latent]
    parts = [score_sessions(turns, rest, rules)]
    if latent:
        dec = with_decoded_labels(turns, rules)
        parts.append(C.profile_scores(dec, latent).assign(n_turns=lambda d: np.nan))
    out = pd.concat(parts, ignore_index=True)
    out["session_id"] = out["session_id"].astype(str)
    return out


def _decoder_rows(turns: pd.DataFrame, user: str, matched: Sequence[str]) -> list[dict]:
    rows = []
    for rules in ("frozen", "expanded"):
        dec = with_decoded_labels(turns, rules)
        pr = decoder_precision_recall(dec["decoded_label"], dec["correct"].astype(bool))
        intent = dec.get("feedback_intent")
        lab = dec["decoded_label"].astype(float)
        if intent is not None:
            m = lab.notna() & intent.isin(["positive", "negative"])
            pr["intent_agreement"] = float(((lab[m] == 1) == (intent[m] == "positive")).mean()) if m.any() else np.nan
        sc = C.profile_scores(C.label_condition(dec, "observed"), matched)
        wide = sc.pivot(index="session_id", columns="estimator", values="CBF")
        best = wide.idxmax(axis=1)
        row = {"model": str(turns["model"].iloc[0]), "user": user, "rules": rules, **pr,
               "n_sessions": float(len(wide)),
               "global_best_share": float((best == "Global").mean())}
        row.update({f"CBF_{e}": float(wide[e].mean()) for e in wide.columns})
        rows.append(row)
    return rows


def _user_kind(turns: pd.DataFrame) -> str:
    u = turns["user_model"].astype(str).iloc[0] if len(turns) else "rules"
    return "rule" if u == "rules" else f"llm:{u}"


def reliability_table(turns: pd.DataFrame, n_bins: int = 10) -> pd.DataFrame:
    """Recorded answer confidence in 10 equal-width bins (confidence 1 in the last bin), with
    each bin's mean confidence, accuracy and count (paper Figure 7)."""
    rows = []
    for model, g in turns.groupby("model", sort=False):
        c = g["confidence"].astype(float).to_numpy()
        y = g["correct"].astype(bool).to_numpy()
        b = np.minimum((c * n_bins).astype(int), n_bins - 1)
        for k in range(n_bins):
            m = b == k
            rows.append({"model": model, "bin_lo": k / n_bins, "bin_hi": (k + 1) / n_bins,
                         "confidence": float(c[m].mean()) if m.any() else np.nan,
                         "accuracy": float(y[m].mean()) if m.any() else np.nan,
                         "count": int(m.sum())})
    return pd.DataFrame(rows)


def _tiers(dec: pd.DataFrame, prior: Mapping[str, float]) -> pd.DataFrame:
    """Pooled CBF of TIER_ESTIMATORS over the domains of each subject tier (paper §G.4)."""
    model = str(dec["model"].iloc[0])
    s = Stream.from_frame(dec.sort_values(["session_id", "turn"], kind="stable"))
    profiles = {e: (dict(prior) if e == "ZS" else fit_estimator(e, s, query=False).profile)
                for e in TIER_ESTIMATORS}
    rows = []
    for tier, g in dec.groupby("tier", sort=False):
        dom, y = g["domain"].astype(str).to_numpy(), g["correct"].astype(bool).to_numpy()
        for e, p in profiles.items():
            m = profile_metrics(p, dom, y)
            rows.append({"model": model, "tier": tier, "estimator": e, "CBF": m["CBF"],
                         "bias": m["bias"], "n_domains": m["n_domains"],
                         "accuracy": float(y.mean())})
    return pd.DataFrame(rows)


def _heldout(dec: pd.DataFrame, profiles: pd.DataFrame, seed: int,
             estimators: Sequence[str]) -> pd.DataFrame:
    """Held-out prediction (paper §F.4, §E.10): profiles from the pooled train-half records
    predict the test-half domain accuracies (MAE over the `n_domains` test domains with >= 2
    answers); `cbf_train` scores each profile on the train half itself (what R4's held-out
    variant selects on). `n_stated`: the test domains the profile states (a prompted level's
    parsed values; a domain it leaves out counts 0.5, NoMemory's value); `vs_nomemory` with
    `vs_nomemory_lo` / `_hi`: the mean paired difference of the absolute errors from
    NoMemory's over the test domains, with its Student-t interval."""
    from selfknow.report.findings import LEVEL
    from selfknow.stats.hypothesis import mean_ci

    model = str(dec["model"].iloc[0])
    is_train = C.heldout_split(dec, seed)
    tr, te = dec[is_train], dec[~is_train]
    s = Stream.from_frame(tr.sort_values(["session_id", "turn"], kind="stable"))
    prof = {e: fit_estimator(e, s, query=False).profile for e in estimators}
    stated = {e: set(p) for e, p in prof.items()}
    for e, rows in (("ZS", profiles[(profiles["method"] == "zs_prior") & (profiles["session_id"] == MODEL_LEVEL)]),
                    ("LSA", profiles[profiles["method"] == "lsa_train"])):
        if len(rows):
            prof[e] = rows.groupby("domain")["p_hat"].mean().to_dict()
            stated[e] = set(rows.loc[~rows["filled"].astype(bool), "domain"].astype(str))
    err = {e: C.domain_errors(p, te["domain"].astype(str), te["correct"].astype(bool)) for e, p in prof.items()}
    base = err.get("NoMemory", {})
    out = []
    for e, p in prof.items():
        m, lo, hi = mean_ci([v - base[d] for d, v in err[e].items() if d in base], LEVEL)
        out.append({"model": model, "estimator": e,
                    "mae_test": C.mean_error(err[e]),
                    "cbf_train": profile_metrics(p, tr["domain"].astype(str), tr["correct"].astype(bool))["CBF"],
                    "n_train": len(tr), "n_test": len(te), "n_domains": len(err[e]),
                    "n_stated": len(stated[e] & set(err[e])),
                    "vs_nomemory": float(m), "vs_nomemory_lo": float(lo), "vs_nomemory_hi": float(hi)})
    return pd.DataFrame(out)


#: score_job's settings, each by the `ladder` key of the config schema that holds its default
SCORE_SETTINGS = {"latent_query": "latent_query", "session_bootstrap_draws": "session_bootstrap",
                  "cluster_bootstrap_draws": "cluster_bootstrap", "cluster_estimators": "cluster_estimators",
                  "flips": "noise_flips", "coverages": "noise_coverages", "noise_repeats": "noise_repeats",
                  "grid_sessions": "grid_sessions", "grid_estimators": "grid_estimators",
                  "random_partitions": "random_partitions", "partition": "partition",
                  "prefix_step": "prefix_step", "prefix_estimators": "prefix_estimators"}


def _score_settings(given: Mapping) -> dict:
    """`given` completed with the schema's `ladder` defaults (the one place they are written;
    `partition` has none: the built-in semantic partition); a setting score_job does not know
    is an error naming it."""
    from selfknow.schema import defaults

    unknown = set(given) - set(SCORE_SETTINGS)
    if unknown:
        raise TypeError(f"score_job: unknown settings {sorted(unknown)} (known: {sorted(SCORE_SETTINGS)})")
    lad = defaults("ladder")
    return {k: given[k] if k in given else lad.get(key) for k, key in SCORE_SETTINGS.items()}


def _session_parts(turns, dec, profiles, query, s: Mapping, seed: int) -> dict[str, pd.DataFrame]:
    """The main table's per-session scores (every algorithmic estimator and the prompted
    levels), their bootstrap, and the matched-input control (observed / corrected / clean
    labels, session and pooled)."""
    algo = _algorithmic_scores(turns, OFFLINE_ESTIMATORS, s["latent_query"], "frozen")
    sess = pd.concat([algo, prompted_session_scores(turns, profiles, query)], ignore_index=True)
    sess["level"] = sess["estimator"].map(LEVELS).fillna("control")
    boots = [session_bootstrap(sess, m, s["session_bootstrap_draws"], seed)
             for m in ("CBF", "norm_CBF", "bias", "shape_error")]
    ctrl = []
    for cond in C.LABEL_CONDITIONS:
        lab = C.label_condition(dec, cond)
        ctrl.append(C.profile_scores(lab, C.MATCHED).assign(condition=cond, scope="session"))
        ctrl.append(C.profile_scores(lab, C.MATCHED, pooled=True).assign(condition=cond, scope="pooled"))
    for est, cond in (("LSA", "observed"), ("LSA-clean", "clean")):
        p = sess[sess["estimator"] == est]
        if len(p):
            ctrl.append(p[["model", "session_id", "CBF", "bias", "shape_error", "n_domains"]]
                        .assign(estimator="LSA", condition=cond, scope="session"))
    cov = {c: float(C.label_condition(dec, c)["label_strict"].notna().mean()) for c in C.LABEL_CONDITIONS}
    return {"sessions": sess, "bootstrap": pd.concat(boots, ignore_index=True),
            "controls": pd.concat(ctrl, ignore_index=True).assign(coverage=lambda d: d["condition"].map(cov))}


def _analysis_parts(turns, dec, obs, profiles, s: Mapping, seed: int) -> dict[str, pd.DataFrame]:
    """The noise x coverage grid on clean labels, the domain partitions (fine domains,
    semantic categories, random groups of equal sizes), the prior tiers, the prefix curves
    and the held-out prediction."""
    gt = _first_sessions(turns, s["grid_sessions"]) if s["grid_sessions"] else turns
    grid = C.noise_grid(gt, s["flips"], s["coverages"], s["grid_estimators"], repeats=s["noise_repeats"], seed=seed)
    doms = sorted(turns["domain"].astype(str).unique())
    sem = C.semantic_partition(doms, s["partition"])
    parts = [C.profile_scores(obs, C.MATCHED + ["NoMemory"]).assign(partition="domain", repeat=0)]
    parts.append(C.profile_scores(C.apply_partition(obs, sem), C.MATCHED + ["NoMemory"])
                 .assign(partition="semantic", repeat=0))
    sizes = C.partition_sizes(sem)
    for r in range(s["random_partitions"]):
        rp = C.random_partition(doms, sizes, seed + 1000 + r)
        parts.append(C.profile_scores(C.apply_partition(obs, rp), C.MATCHED + ["NoMemory"])
                     .assign(partition="random", repeat=r))
    prior = profiles[(profiles["method"] == "zs_prior") & (profiles["session_id"] == MODEL_LEVEL)]
    n_turns, step = int(turns["turn"].max()), s["prefix_step"]
    lengths = sorted(set(range(step, n_turns + 1, max(1, step))) | {n_turns})
    prefix = pd.concat([C.prefix_curves(C.label_condition(dec, c), lengths, s["prefix_estimators"])
                        .assign(condition=c) for c in ("observed", "clean")], ignore_index=True)
    return {"grid": grid, "partitions": pd.concat(parts, ignore_index=True),
            "tiers": _tiers(obs, dict(zip(prior["domain"], prior["p_hat"]))), "prefix": prefix,
            "heldout": _heldout(obs, profiles, seed, HELDOUT_ESTIMATORS)}


def _user_parts(turns, alt) -> dict[str, pd.DataFrame]:
    """The decoders (frozen vs expanded) for each simulated user, and the simulator comparison
    on the sessions both users played."""
    users = [(turns, _user_kind(turns))] + ([(alt, _user_kind(alt))] if len(alt) else [])
    decoder = pd.DataFrame([r for t, u in users for r in _decoder_rows(t, u, C.MATCHED)])
    sim = []
    if len(alt):
        alt = alt.assign(session_id=alt["session_id"].astype(str))
        shared = set(alt["session_id"])
        for t, u in users:
            t = t[t["session_id"].isin(shared)]
            d = C.label_condition(with_decoded_labels(t, "frozen"), "observed")
            sim.append(C.profile_scores(d, C.MATCHED + ["NoMemory"]).assign(
                user=u, coverage=float(d["label_strict"].notna().mean()),
                accuracy=float(d["correct"].mean())))
    return {"decoder": decoder,
            "simulators": pd.concat(sim, ignore_index=True) if sim else pd.DataFrame(
                columns=["model", "session_id", "estimator", "CBF", "user", "coverage", "accuracy"])}


def _answer_parts(turns, dec, s: Mapping, seed: int) -> dict[str, pd.DataFrame]:
    """The paired cluster bootstrap against Global, the answers' own metrics with the pooled
    CBFs, and the reliability table."""
    pairs = pd.concat([paired_cluster_bootstrap(turns, "Global", e, "CBF", s["cluster_bootstrap_draws"], seed)
                       for e in s["cluster_estimators"]], ignore_index=True) \
        if s["cluster_estimators"] and s["cluster_bootstrap_draws"] > 0 else pd.DataFrame()
    status = turns["answer_status"] if "answer_status" in turns else pd.Series("ok", index=turns.index)
    am = answer_metrics(turns["confidence"].astype(float), turns["correct"].astype(bool))
    pooled_obs = score_pooled(turns, ["Global", "Count", "OraclePDC"], "frozen")
    answers = pd.DataFrame([{
        "model": str(turns["model"].iloc[0]), "n_turns": len(turns), "n_sessions": turns["session_id"].nunique(),
        "n_items": turns["item_id"].nunique(), "unparsed_answers": int((status == "unparsed").sum()),
        "failed_answer_calls": int((status == "error").sum()),
        "label_coverage": float(dec["decoded_label"].notna().mean()),
        **{k: am[k] for k in ("accuracy", "ECE", "AUROC", "HR", "norm_HR", "conf_gap")},
        **{f"pooled_CBF_{e}": float(v) for e, v in zip(pooled_obs["estimator"], pooled_obs["CBF"])},
        "user": _user_kind(turns)}])
    return {"pairs": pairs.assign(scope="pooled") if len(pairs) else pairs, "answers": answers,
            "reliability": reliability_table(turns)}


def score_job(turns_path: str, alt_turns_path: str, profiles_path: str, query_path: str,
              outputs: Mapping[str, str], *, seed: int, **settings) -> dict:
    """Every estimator, control and analysis of one model's recorded sessions; writes one
    parquet per name in SCORE_PARTS to `outputs[name]` (see the module docstring of
    controls.py for the controls). `settings` are those of SCORE_SETTINGS, the schema's
    defaults where not given (`grid_sessions` > 0 restricts the noise grid to the first
    sessions)."""
    s = _score_settings(settings)
    missing = set(SCORE_PARTS) - set(outputs)
    if missing:
        raise ValueError(f"score_job: outputs lack {sorted(missing)}")
    turns = read_parquet(turns_path)
    turns["session_id"] = turns["session_id"].astype(str)
    alt = read_parquet(alt_turns_path)
    profiles = read_parquet(profiles_path)
    dec = with_decoded_labels(turns, "frozen")
    obs = C.label_condition(dec, "observed")
    res = {**_session_parts(turns, dec, profiles, read_parquet(query_path), s, seed),
           **_analysis_parts(turns, dec, obs, profiles, s, seed), **_user_parts(turns, alt),
           **_answer_parts(turns, dec, s, seed)}
    for name in SCORE_PARTS:
        write_parquet(res[name].reset_index(drop=True), outputs[name])
    main = res["sessions"].groupby("estimator")["CBF"].mean()
    return {"model": str(turns["model"].iloc[0]), "sessions": int(turns["session_id"].nunique()),
            **{f"CBF_{k}": round(float(v), 3) for k, v in main.items()}}
