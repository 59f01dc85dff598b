"""Held-out prediction from recorded task outcomes (LADDER §F.4, Table 34).

Per configuration (a model and the ReAct configuration it ran), each subject's records are
halved by question (`controls.heldout_split`: seeded, ceil(n/2) of a subject's questions to
train); profiles formed from the train half predict the test half's subject accuracies, scored
by the mean absolute error over the subjects with >= 2 test records (`controls.mae`; lower is
better):

* Global  the training accuracy pooled over subjects, the same value for every subject;
* Count   each subject's training accuracy (the Count estimator on the recorded outcomes);
* Beta    each subject's Beta(1, 1) posterior mean (Bayes-Domain on the recorded outcomes);
* ZS      the configuration's zero-shot profile, stated before any record (empty when the
          records come without one).

The records are ReAct trajectories (`selfknow.stages.tasks.react`; their success flags are the
outcomes), those the workflow ran (`react_agent`) or recorded ones, or, in the offline default, the LADDER sessions' answers
(`session_records`). Unlike `jobs._heldout` (R4's held-out variant, §E.10), no feedback is
decoded: the profiles see the recorded outcomes, as Table 34's do.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.stages.datasets.source import ItemError, at, read_rows, require_fields

from selfknow.report.tables import Built

from . import controls as C
from .catalog import HELDOUT_ENTRIES
from .estimators import Stream, fit_estimator
from .metrics import domain_accuracy
from .prompted import MODEL_LEVEL

#: Table 34's estimators, in its column order
ESTIMATORS = ("Global", "Count", "Beta", "ZS")
RECORD_COLUMNS = ["model", "config", "item_id", "domain", "correct"]
ZERO_SHOT_COLUMNS = ["model", "config", "domain", "p_hat"]
TABLE_COLUMNS = ["model", "config", "n_subjects", "n_train", "n_test", "train_accuracy", *ESTIMATORS, "best"]


def _outcome_stream(records: pd.DataFrame) -> Stream:
    """The records as a label stream whose labels are the recorded outcomes (no feedback)."""
    y = records["correct"].astype(float).to_numpy()
    n = len(records)
    return Stream(domain=records["domain"].astype(str).to_numpy(), confidence=np.full(n, np.nan),
                  correct=y.astype(bool), label=y, label_uf=y, in_expertise=np.zeros(n, bool))


def _profiles(train: pd.DataFrame, zero_shot: dict[str, float] | None) -> dict[str, dict[str, float] | None]:
    s = _outcome_stream(train)
    domains = sorted(set(s.domain))
    return {"Global": dict.fromkeys(domains, float(train["correct"].astype(float).mean())),
            "Count": fit_estimator("Count", s, query=False).profile,
            "Beta": fit_estimator("Bayes-Domain", s, query=False).profile,
            "ZS": zero_shot}


def _best(row: dict) -> str:
    """The estimator(s) with the lowest MAE, ties joined by " = " ("" when no subject has
    two test records)."""
    scored = {e: row[e] for e in ESTIMATORS if not np.isnan(row[e])}
    if not scored:
        return ""
    low = min(scored.values())
    return " = ".join(e for e, v in scored.items() if np.isclose(v, low, rtol=0, atol=1e-12))


def predict_heldout(records: pd.DataFrame, zero_shot: pd.DataFrame | None, seed: int) -> pd.DataFrame:
    """Table 34: one row per configuration (model, config) of `records` (RECORD_COLUMNS,
    `correct` 0/1) with the test-half MAE of each of ESTIMATORS, the subjects scored, the
    train and test sizes and the training accuracy. `zero_shot` (ZERO_SHOT_COLUMNS) gives
    each configuration's zero-shot profile; it must cover every subject of the configuration's
    records, and a configuration without one has an empty ZS cell."""
    missing = [c for c in RECORD_COLUMNS if c not in records.columns]
    if missing:
        raise ValueError(f"held-out prediction: records lack columns {missing}")
    recs = records.assign(model=records["model"].fillna("").astype(str),
                          config=records["config"].fillna("").astype(str))
    zs = {} if zero_shot is None else {
        k: dict(zip(g["domain"].astype(str), g["p_hat"].astype(float)))
        for k, g in zero_shot.assign(model=zero_shot["model"].fillna("").astype(str),
                                     config=zero_shot["config"].fillna("").astype(str)).groupby(["model", "config"])}
    rows = []
    for (model, config), g in recs.groupby(["model", "config"], sort=True):
        prior = zs.get((model, config))
        if prior is not None:
            lacking = sorted(set(g["domain"].astype(str)) - set(prior))
            if lacking:
                raise ValueError(f"held-out prediction: the zero-shot profile of model {model!r}, config "
                                 f"{config!r} has no estimate for subjects {lacking}")
        is_train = C.heldout_split(g, seed)
        train, test = g[is_train], g[~is_train]
        dom, y = test["domain"].astype(str), test["correct"].astype(bool)
        row = {"model": model, "config": config,
               "n_subjects": len(domain_accuracy(dom, y)), "n_train": len(train), "n_test": len(test),
               "train_accuracy": float(train["correct"].astype(float).mean())}
        for est, profile in _profiles(train, prior).items():
            row[est] = np.nan if profile is None else C.mae(profile, dom, y)
        row["best"] = _best(row)
        rows.append(row)
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def react_files(spec: dict) -> list[Path]:
    """The files `react_records` reads for `spec` (for the provenance sidecar): `path` itself,
    or the trajectories and zero-shot profiles in the directory `path`."""
    path = Path(spec["path"])
    if not path.is_dir():
        return [path]
    return [path / f"{stem}{ext}" for stem in ("test", "zero_shot") for ext in (".parquet", ".jsonl")
            if (path / f"{stem}{ext}").is_file()]


def react_records(name: str, spec: dict) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The recorded ReAct trajectories of dataset `name` (loader `react`, `spec["path"]`) as
    records, and their zero-shot profiles when `path` is a directory that also holds
    `zero_shot.jsonl` (or `.parquet`) beside `test.jsonl`: one row per model, config and
    subject, stated before the trajectories (`model`, `config`, `domain`, `p_hat` in [0, 1]).
    None otherwise (Table 34's ZS column is then empty)."""
    from selfknow.stages.tasks import react

    records = react.load(name, spec)[RECORD_COLUMNS]
    found = [f for f in react_files(spec) if f.stem == "zero_shot"]
    if not found:
        return records, None
    rows, where = read_rows(f"{name} zero-shot profiles", {"path": str(found[0])}, "test")
    require_fields(rows, ("domain", "p_hat"), where)
    seen = set()
    for i, r in enumerate(rows):
        p, key = r["p_hat"], (r.get("model"), r.get("config"), r["domain"])
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ItemError(f"{at(where, i)}: p_hat must be a number in [0, 1], got {p!r}")
        if key in seen:
            raise ItemError(f"{at(where, i)}: a second estimate for model {key[0]!r}, config {key[1]!r}, "
                            f"subject {key[2]!r}")
        seen.add(key)
    zero_shot = pd.DataFrame([{"model": r.get("model"), "config": r.get("config"), "domain": r["domain"],
                               "p_hat": float(r["p_hat"])} for r in rows], columns=ZERO_SHOT_COLUMNS)
    return records, zero_shot


def session_records(turns: pd.DataFrame, profiles: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The offline analogue's records: each question a model answered in its LADDER sessions,
    once (its answer is fixed per question, so repeats across sessions add no record), and the
    model's zero-shot prior (the L1 profile, asked once per model) as its ZS profile. The
    configuration is the model (config "")."""
    recs = turns.drop_duplicates(["model", "item_id"])
    records = pd.DataFrame({"model": recs["model"].astype(str), "config": "",
                            "item_id": recs["item_id"].astype(str), "domain": recs["domain"].astype(str),
                            "correct": recs["correct"].astype(int)})[RECORD_COLUMNS]
    prior = profiles[(profiles["method"] == "zs_prior") & (profiles["session_id"].astype(str) == MODEL_LEVEL)]
    zero_shot = pd.DataFrame({"model": prior["model"].astype(str), "config": "",
                              "domain": prior["domain"].astype(str), "p_hat": prior["p_hat"].astype(float)})
    return records.reset_index(drop=True), zero_shot[ZERO_SHOT_COLUMNS].reset_index(drop=True)


NOTE = ("Per configuration, each subject's questions are halved (seeded, ceil(n/2) to train); profiles from "
        "the train half's recorded outcomes predict the test half's subject accuracies: MAE over subjects with "
        ">= 2 test records, lower is better. Global = pooled training accuracy for every subject; Count = the "
        "subject's training accuracy; Beta = its Beta(1, 1) posterior mean; ZS = the zero-shot profile; best = "
        "the lowest MAE. ")
SOURCE_NOTES = {
    "react": "Records: the recorded ReAct trajectories of dataset {dataset} (success flags); ZS: {zero_shot}.",
    "agent": ("Records: ReAct trajectories this workflow ran, as the authors released none (a deviation: "
              "selfknow.protocols.ladder.react_agent, a ReAct agent with calculate and finish tools on the "
              "questions of {dataset}, success = the gold option within the step limit); ZS: each "
              "configuration's L1 zero-shot prior over the subjects, stated before its trajectories."),
    "sessions": ("Offline analogue of Table 34 (held-out ReAct prediction): no ReAct trajectories exist offline, "
                 "so each LADDER model's session answers on {dataset} (each question once; its domains stand "
                 "for ReAct's subjects) are the records, one configuration per model, and the L1 zero-shot "
                 "prior stated for the model is its ZS profile, by the model itself if it is a chat model, "
                 "else by ladder.prompted_model ({who})."),
}


def table34(records: pd.DataFrame, zero_shot: pd.DataFrame | None, seed: int, source_note: str) -> Built:
    """Table 34 (`predict_heldout`); its note: `NOTE`, then `source_note`, what the records are."""
    table = predict_heldout(records, zero_shot, seed)
    wins = table["best"].str.split(" = ").explode().value_counts()
    return Built(table, (NOTE + source_note,), summary={"configurations": len(table), "records": len(records),
                                                        **{f"best_{e}": int(wins.get(e, 0)) for e in ESTIMATORS}})


def table34_inputs(source: str, dataset: str, react_specs: Sequence[dict] = (), turns_paths: Sequence[str] = (),
                   profiles_paths: Sequence[str] = (),
                   stated_by: Mapping[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    """Table 34's records, zero-shot profiles and what they are (`SOURCE_NOTES`): ReAct
    trajectories (`source` "react": recorded ones, or "agent": those the ladder_react rule ran;
    the trajectories of every spec of `react_specs`, dataset `dataset`) or, offline, the LADDER
    sessions and prompted profiles of every model (`source` "sessions": `turns_paths`,
    `profiles_paths`; `stated_by` maps a model to the model that stated its ZS prior, which the
    note names)."""
    from selfknow.records import read_parquet

    if source in ("react", "agent"):
        if not react_specs:
            raise ValueError("Table 34: source 'react' needs the trajectories' dataset specs")
        parts = [react_records(dataset, spec) for spec in react_specs]
        records = pd.concat([r for r, _ in parts], ignore_index=True)
        profiles = [z for _, z in parts if z is not None]
        zero_shot = pd.concat(profiles, ignore_index=True) if profiles else None
        return records, zero_shot, SOURCE_NOTES[source].format(
            dataset=dataset, zero_shot="the profiles recorded with them" if zero_shot is not None
            else "none recorded (empty column)")
    if source == "sessions":
        parts = [session_records(read_parquet(t), read_parquet(p)) for t, p in zip(turns_paths, profiles_paths,
                                                                                 strict=True)]
        records = pd.concat([r for r, _ in parts], ignore_index=True)
        zero_shot = pd.concat([z for _, z in parts], ignore_index=True)
        who = "; ".join(f"{m}: stated by {(stated_by or {}).get(m, m)}" for m in records["model"].unique())
        return records, zero_shot, SOURCE_NOTES["sessions"].format(dataset=dataset, who=who)
    raise ValueError(f"Table 34: unknown source {source!r}; known: {sorted(SOURCE_NOTES)}")


def write_table34(outputs: Mapping[str, str], *, seed: int, source: str, dataset: str,
                  react_specs: Sequence[dict] = (), turns_paths: Sequence[str] = (),
                  profiles_paths: Sequence[str] = (), stated_by: Mapping[str, str] | None = None,
                  provenance: dict | None = None) -> dict:
    """Write Table 34 (`catalog.HELDOUT_ENTRIES`, through `selfknow.report.tables.write_entries`)
    to `outputs["table34_csv"]` / `outputs["table34_md"]` from the records `table34_inputs`
    reads (its arguments)."""
    from selfknow.report.tables import write_entries

    from .tables import summary

    records, zero_shot, source_note = table34_inputs(source, dataset, react_specs, turns_paths, profiles_paths,
                                                     stated_by)
    known = {"records": records, "zero_shot": zero_shot, "seed": seed, "source_note": source_note}
    return summary(write_entries(HELDOUT_ENTRIES, known, outputs, provenance=provenance))
