"""LCAE's record formats: Stage-1 responses and Stage-2 self-assessments from any source
(docs/own-results.md, "selfknow lcae-eval"), read from CSV, JSON Lines or parquet and
checked, and the workflow's own Stage-1/Stage-2 records converted to them.

Stage 1, one row per response (SPEC §3 "Stage 1"):
  examinee    str, required   who answered (the paper: a model x prompting strategy)
  item        str, required   item id
  correct     0/1, required   the answer was right
  repeat      int, optional   repeat index (default 0); an examinee's repeats of an item
                              become one response (`evaluate.fit_stage1`'s `repeats` rule)
  answer      str, optional   the answer given (provenance only)
  status      str, optional   parsed | unparsed | truncated (default parsed): counted in the notes
  model, checkpoint, strategy  str, optional  the examinee's model (CE prices and Figure 2
                              group by it; default the examinee), checkpoint and strategy
                              (default empty)

Stage 2, one row per self-assessment (SPEC §3 "Stage 2"):
  examinee    str, required   a Stage-1 examinee (the paper: the Standard-prompting one)
  item        str, required   an item of Stage 1
  condition   str, required   baseline | ids | dpr | ids_dpr
  repeat      int, optional   repeat index (default 0)
  error_p     float, required (or `confidence`)  LLM_ModelErrorP, the stated probability that
                              the answer is wrong, in [0, 1]; empty = no usable assessment
                              (left out of the examinee's LCAE and counted)
  confidence  float           instead of error_p: the stated probability that the answer is
                              right (error_p = 1 - confidence)
  correct_final 0/1, optional the final (possibly revised) answer was right; default the
                              examinee's Stage-1 response, its lowest repeat's (no revision)
  route       str, optional   fast | slow, DPR's route (default fast)
  truncated   0/1, optional   an empty error_p was cut at a token budget (else: unparsed)
  tokens_in, tokens_out  int, optional  tokens used (default 0)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from selfknow.records import RecordTable, shown

from .examinees import STATUSES
from .metacognition import CONDITIONS

STAGE1_COLUMNS = ["examinee", "item", "repeat", "correct", "answer", "status", "model", "checkpoint", "strategy"]
STAGE2_COLUMNS = ["examinee", "item", "condition", "repeat", "error_p", "correct_final", "route", "truncated",
                  "tokens_in", "tokens_out"]
ROUTES = ("fast", "slow")


def examinee_id(model: str, checkpoint: str, strategy: str) -> str:
    """The workflow's name of an examinee: "<model>@<checkpoint>/<strategy>"."""
    return f"{model}@{checkpoint}/{strategy}"


def _one_of(t: RecordTable, column: str, values: tuple[str, ...], default: str | None = None) -> pd.Series:
    s = t.text(column, default=default)
    bad = np.flatnonzero(~s.isin(values).to_numpy())
    if bad.size:
        raise t.error(int(bad[0]), column, f"{shown(s.iloc[bad[0]])} is not one of {', '.join(values)}")
    return s


def _unique_keys(t: RecordTable, df: pd.DataFrame, keys: list[str]) -> None:
    dup = np.flatnonzero(df.duplicated(keys).to_numpy())
    if dup.size:
        raise ValueError(f"{t.path}: {t.where(int(dup[0]))}: a second record of ("
                         + ", ".join(f"{k}={shown(df[k].iloc[dup[0]])}" for k in keys) + ")")


def read_stage1(path) -> tuple[pd.DataFrame, RecordTable]:
    """Stage-1 responses in the format above, checked; (frame in STAGE1_COLUMNS, the table)."""
    t = RecordTable(path)
    t.require("examinee", "item", "correct")
    examinee = t.text("examinee")
    df = pd.DataFrame({
        "examinee": examinee, "item": t.text("item"), "repeat": t.integer("repeat", default=0),
        "correct": t.binary("correct"),
        "answer": t.frame["answer"] if t.has("answer") else None,
        "status": _one_of(t, "status", STATUSES, default="parsed"),
        "model": t.text("model") if t.has("model") else examinee,
        "checkpoint": t.text("checkpoint", default=""), "strategy": t.text("strategy", default="")})
    _unique_keys(t, df, ["examinee", "item", "repeat"])
    return df, t


def read_stage2(path, stage1: pd.DataFrame) -> tuple[pd.DataFrame, RecordTable]:
    """Stage-2 self-assessments in the format above, checked against the Stage-1 responses
    (every examinee must have Stage-1 responses and every item a Stage-1 difficulty);
    `correct_final` defaults to the examinee's Stage-1 response to the item (lowest repeat)."""
    t = RecordTable(path)
    t.require("examinee", "item", "condition")
    if t.has("error_p") == t.has("confidence"):
        raise ValueError(f"{t.path}: needs exactly one of the columns 'error_p' (probability the answer is "
                         f"wrong) and 'confidence' (probability it is right); the file has {list(t.frame.columns)}")
    error_p = (t.probability("error_p", missing_ok=True) if t.has("error_p")
               else 1.0 - t.probability("confidence", missing_ok=True))
    df = pd.DataFrame({
        "examinee": t.text("examinee"), "item": t.text("item"), "condition": _one_of(t, "condition", CONDITIONS),
        "repeat": t.integer("repeat", default=0), "error_p": error_p, "route": _one_of(t, "route", ROUTES, "fast"),
        "truncated": t.binary("truncated", default=False),
        "tokens_in": t.integer("tokens_in", default=0), "tokens_out": t.integer("tokens_out", default=0)})
    known = set(stage1["examinee"])
    items = set(stage1["item"])
    for column, ok in (("examinee", df["examinee"].isin(known)), ("item", df["item"].isin(items))):
        bad = np.flatnonzero(~ok.to_numpy())
        if bad.size:
            what = "examinee has no Stage-1 responses" if column == "examinee" else "item has no Stage-1 responses"
            raise t.error(int(bad[0]), column, f"{shown(df[column].iloc[bad[0]])}: this {what}")
    if t.has("correct_final"):
        df["correct_final"] = t.binary("correct_final")
    else:
        first = stage1.sort_values("repeat", kind="stable").drop_duplicates(["examinee", "item"])
        df["correct_final"] = df.merge(first, on=["examinee", "item"], how="left")["correct"].to_numpy(dtype=bool)
    _unique_keys(t, df, ["examinee", "item", "condition", "repeat"])
    return df[STAGE2_COLUMNS], t


def stage1_records(workflow: pd.DataFrame) -> pd.DataFrame:
    """The workflow's Stage-1 records (`jobs.stage1_job`) in the Stage-1 format."""
    return pd.DataFrame({
        "examinee": [examinee_id(m, c, s) for m, c, s in
                     zip(workflow["model"], workflow["checkpoint"], workflow["strategy"])],
        "item": workflow["item_id"].to_numpy(), "repeat": 0, "correct": workflow["correct"].astype(bool).to_numpy(),
        "answer": workflow.get("answer"), "status": workflow["status"].to_numpy(),
        "model": workflow["model"].to_numpy(), "checkpoint": workflow["checkpoint"].to_numpy(),
        "strategy": workflow["strategy"].to_numpy()})[STAGE1_COLUMNS]


def stage2_records(workflow: pd.DataFrame) -> pd.DataFrame:
    """The workflow's Stage-2 records (`jobs.stage2_job`, a Standard-prompting examinee's) in
    the Stage-2 format: an unparsed or truncated assessment has an empty error_p."""
    ok = workflow["parsed"].to_numpy(dtype=bool) & np.isfinite(workflow["error_p"].to_numpy(dtype=float))
    return pd.DataFrame({
        "examinee": [examinee_id(m, c, "standard") for m, c in zip(workflow["model"], workflow["checkpoint"])],
        "item": workflow["item_id"].to_numpy(), "condition": workflow["condition"].to_numpy(),
        "repeat": workflow["repeat"].astype(np.int64).to_numpy(),
        "error_p": np.where(ok, workflow["error_p"].to_numpy(dtype=float), np.nan),
        "correct_final": workflow["correct_final"].astype(bool).to_numpy(), "route": workflow["mode"].to_numpy(),
        "truncated": (workflow["finish_reason"] == "length").to_numpy(),
        "tokens_in": workflow["tokens_in"].astype(np.int64).to_numpy(),
        "tokens_out": workflow["tokens_out"].astype(np.int64).to_numpy()})[STAGE2_COLUMNS]
