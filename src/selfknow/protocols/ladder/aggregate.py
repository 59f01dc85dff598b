"""Scoring LADDER sessions with every estimator, and the importer of the authors' released
sessions (SPEC §2; paper §3, §4.1).

`score_sessions` -> one row per (model, session, estimator): profile metrics (CBF, normalised
CBF, bias, shape error, Kendall τ) and answer metrics of the estimator's query confidences.
`score_pooled` -> the same on each model's pooled records (one stream per model).
`authors_aggregates` -> the authors' aggregate table (session means) of per-session scores, as
the importer (`tables.import_job`) writes it for the released files.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .estimators import RELEASED_OFFLINE, Stream, fit_estimator, resolve
from .feedback import decode_feedback
from .metrics import answer_metrics, profile_metrics, round_like_authors
from .records import validate_turns

AGG_COLUMNS = ["model", "baseline", "CBF", "ECE", "Brier", "AUROC", "HR"]
OFFLINE_ESTIMATORS = RELEASED_OFFLINE + ["Global", "Count", "Dawid-Skene", "GLAD"]


def with_decoded_labels(turns: pd.DataFrame, rules: str = "frozen") -> pd.DataFrame:
    """A copy of `turns` with `feedback_text` decoded by rule set `rules`: columns
    decoded_category, decoded_rule, decoded_label and label_<map> for each label map."""
    dec = decode_feedback(turns["feedback_text"], rules)
    out = turns.drop(columns=[c for c in dec.columns if c in turns.columns]).copy()
    for c in dec.columns:
        out[c] = dec[c].to_numpy()
    return out


def _ordered(turns: pd.DataFrame) -> pd.DataFrame:
    """Stream order: model, session (numeric ids numerically: "2" before "10"), turn."""
    key = pd.to_numeric(turns["session_id"], errors="coerce")
    return (turns.assign(_sid_num=key, _sid=turns["session_id"].astype(str))
            .sort_values(["model", "_sid_num", "_sid", "turn"], kind="stable", na_position="last")
            .drop(columns=["_sid_num", "_sid"]))


def _score_stream(df: pd.DataFrame, est: str, authors_rounding: bool, s: Stream | None = None) -> dict:
    s = Stream.from_frame(df) if s is None else s
    out = fit_estimator(est, s)
    row = profile_metrics(out.profile, s.domain, s.correct)
    # The authors score every non-abstained turn (abstain is always False in the releases).
    keep = ~df["abstain"].astype(bool).to_numpy() if "abstain" in df else np.ones(len(s), bool)
    row.update(answer_metrics(out.query_confidence[keep], s.correct[keep]))
    row["n_turns"] = float(len(s))
    row["n_labels"] = float((~np.isnan(s.label)).sum())
    return round_like_authors(row) if authors_rounding else row


def _prepared(turns: pd.DataFrame, estimators: list[str] | None, rules: str) -> tuple[pd.DataFrame, list[str]]:
    """Validated turns with decoded labels in session/turn order, and the estimators' canonical
    names (default: every offline one)."""
    validate_turns(turns)
    names = [resolve(e) for e in (estimators or OFFLINE_ESTIMATORS)]
    return _ordered(with_decoded_labels(turns, rules)), names


def score_sessions(turns: pd.DataFrame, estimators: list[str] | None = None, rules: str = "frozen",
                   authors_rounding: bool = False) -> pd.DataFrame:
    """Per-session metrics of each estimator.

    turns: session-turn records (records.TURN_COLUMNS; at least records.REQUIRED_COLUMNS).
    estimators: names from estimators.ESTIMATORS (or aliases); default all offline ones.
    rules: feedback rule set used to decode `feedback_text` (`frozen`, `expanded`, a path).
    authors_rounding: round per-session values as the authors did before averaging.
    Returns one row per (model, session_id, estimator) with CBF, CBF_L0, norm_CBF, bias,
    shape_error, kendall_tau, n_domains, accuracy, ECE, Brier, AUROC, HR, norm_HR, conf_gap,
    n_turns, n_labels.
    """
    df, names = _prepared(turns, estimators, rules)
    rows = []
    for (model, sid), g in df.groupby(["model", "session_id"], sort=False):
        s = Stream.from_frame(g)
        for est in names:
            r = _score_stream(g, est, authors_rounding, s)
            rows.append({"model": model, "session_id": sid, "estimator": est, **r})
    return pd.DataFrame(rows)


def score_pooled(turns: pd.DataFrame, estimators: list[str] | None = None,
                 rules: str = "frozen") -> pd.DataFrame:
    """Pooled scores: each estimator fitted once on all of a model's records (sessions in
    order), scored against the model's pooled domain accuracies (paper §4.1)."""
    df, names = _prepared(turns, estimators, rules)
    rows = []
    for model, g in df.groupby("model", sort=False):
        s = Stream.from_frame(g)
        for est in names:
            rows.append({"model": model, "estimator": est, **_score_stream(g, est, False, s)})
    return pd.DataFrame(rows)


def session_profiles(turns: pd.DataFrame, estimators: list[str] | None = None,
                     rules: str = "frozen") -> pd.DataFrame:
    """Long table of end-of-session profiles: model, session_id, estimator, domain, p_hat,
    accuracy, n (all domains of the session; eligibility is n >= 2)."""
    df, names = _prepared(turns, estimators, rules)
    rows = []
    for (model, sid), g in df.groupby(["model", "session_id"], sort=False):
        s = Stream.from_frame(g)
        acc = g.groupby("domain")["correct"].agg(["mean", "size"])
        for est in names:
            prof = fit_estimator(est, s).profile
            for d, p in prof.items():
                rows.append({"model": model, "session_id": sid, "estimator": est, "domain": d,
                             "p_hat": p, "accuracy": float(acc.loc[d, "mean"]),
                             "n": int(acc.loc[d, "size"])})
    return pd.DataFrame(rows)


def session_means(per_session: pd.DataFrame) -> pd.DataFrame:
    """Mean over sessions of each metric per (model, estimator), ignoring NaN."""
    num = per_session.select_dtypes("number").columns
    return per_session.groupby(["model", "estimator"], sort=False)[list(num)].mean().reset_index()


def authors_aggregates(per_session: pd.DataFrame) -> pd.DataFrame:
    """The authors' aggregate table from unrounded per-session scores (`score_sessions`):
    each session's metrics rounded as their scorer rounds them, then averaged over sessions ->
    model, baseline, CBF, ECE, Brier, AUROC, HR."""
    rounded = pd.DataFrame([round_like_authors(r) for r in per_session.to_dict("records")])
    return session_means(rounded).rename(columns={"estimator": "baseline"})[AGG_COLUMNS]


def read_released_aggregates(agg_dir: str | Path) -> pd.DataFrame:
    """The authors' `all_baselines_*.json` files as a long table model, baseline, metrics."""
    rows = []
    files = sorted(Path(agg_dir).rglob("all_baselines_*.json"))
    if not files:
        raise FileNotFoundError(f"{agg_dir}: no all_baselines_*.json files")
    for f in files:
        with open(f, encoding="utf-8") as fh:
            doc = json.load(fh)
        if "aggregate" not in doc or "agent_model" not in doc:
            raise ValueError(f"{f}: needs keys 'agent_model' and 'aggregate'")
        for b, m in doc["aggregate"].items():
            rows.append({"model": doc["agent_model"], "baseline": b,
                         **{k: m.get(k) for k in AGG_COLUMNS[2:]}})
    return pd.DataFrame(rows)
