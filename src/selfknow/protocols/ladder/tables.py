"""LADDER tables and figures (SPEC §2 "Targets"), assembled from every model's score parts
(`catalog.SCORE_PARTS`). Pure frame builders (`main_table`, `r4_from_scores`, ...) plus
`write_tables`, which reads the parts and writes every CSV/Markdown table and PNG figure.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.report.catalog import names

from . import controls as C
from .catalog import TABLES as CATALOG
from .jobs import LEVELS

#: the catalog's tables of `write_tables` (each written as <name>.csv, <name>.md, ... under
#: results/tables/ladder/) and its figures (PNG under results/figures/ladder/: Figures 4-7)
TABLES = names(CATALOG, job="tables", figure=False)
FIGURES = names(CATALOG, job="tables", figure=True)
#: estimator order of the tables: by level, then as the paper lists them
ORDER = ["NoMemory", "ZS", "LSA", "Global", "Count", "UF-PDC", "Bayes-Domain", "Platt-Online",
         "HistBin-Online", "Dawid-Skene", "GLAD", "EM-Joint", "OraclePDC", "GT-SelfStats"]
#: the representative of each level in Figure 4 (the ladder)
LADDER_LEVELS = {"NoMemory": "L0 NoMemory", "ZS": "L1 ZS", "LSA": "L2 LSA",
                 "OraclePDC": "L3 OraclePDC", "GT-SelfStats": "L4 GT-SelfStats"}
FIG5_ESTIMATORS = ["ZS", "LSA", "Global", "Count", "Bayes-Domain"]


def _order(df: pd.DataFrame, col: str = "estimator") -> pd.DataFrame:
    rank = {e: i for i, e in enumerate(ORDER)}
    key = df[col].map(lambda e: rank.get(e, len(ORDER)))
    return df.assign(_o=key).sort_values(["model", "_o"], kind="stable").drop(columns="_o")


def _est_columns(cols) -> list:
    rank = {e: i for i, e in enumerate(ORDER)}
    return sorted(cols, key=lambda e: (rank.get(e, len(ORDER)), str(e)))


def _pivot(df: pd.DataFrame, index: list[str], value: str = "CBF") -> pd.DataFrame:
    """Mean of `value` per index x estimator, estimators as columns in ORDER."""
    w = df.groupby(index + ["estimator"], sort=False)[value].mean().unstack("estimator")
    return w[_est_columns(w.columns)].reset_index()


# ----------------------------------------------------------------------------- main
def main_table(sessions: pd.DataFrame, bootstrap: pd.DataFrame) -> pd.DataFrame:
    """Models x estimators: mean session CBF with session-bootstrap SE and 95 % CI, normalised
    CBF, signed bias b, centred shape error e_shape, Kendall τ, answer-level ECE / AUROC of the
    estimator's query confidences, sessions, and for the prompted levels the share of
    sessions whose JSON profile was unparsable (paper §4.2 main table)."""
    num = ["CBF", "norm_CBF", "bias", "shape_error", "kendall_tau", "ECE", "AUROC"]
    have = [c for c in num if c in sessions.columns]
    g = sessions.groupby(["model", "estimator"], sort=False)
    out = g[have].mean()
    out["n_sessions"] = g["session_id"].nunique()
    out["unparsable"] = g["unparsable"].mean() if "unparsable" in sessions else np.nan
    out = out.reset_index()
    se = bootstrap[bootstrap["metric"] == "CBF"].set_index(["model", "estimator"])
    idx = pd.MultiIndex.from_frame(out[["model", "estimator"]])
    out["SE"] = se["se"].reindex(idx).to_numpy()
    out["CI_low"] = se["ci_low"].reindex(idx).to_numpy()
    out["CI_high"] = se["ci_high"].reindex(idx).to_numpy()
    out["level"] = out["estimator"].map(LEVELS).fillna("control")
    cols = ["model", "level", "estimator", "CBF", "SE", "CI_low", "CI_high", "norm_CBF", "bias",
            "shape_error", "kendall_tau", "ECE", "AUROC", "n_sessions", "unparsable"]
    return _order(out)[[c for c in cols if c in out.columns]].reset_index(drop=True)


def ladder_frame(main: pd.DataFrame) -> pd.DataFrame:
    """Figure 4 input: model, level, cbf, se for the five levels' representatives. A level
    scored on fewer of a model's sessions than its others (the prompted LSA and GT-SelfStats
    on `ladder.prompted_sessions`) is its own series, "<model> (<n> of <N> sessions)", so a
    line joins only levels measured on the same sessions."""
    d = main[main["estimator"].isin(LADDER_LEVELS)]
    full = d.groupby("model")["n_sessions"].transform("max")
    series = [m if n == f else f"{m} ({int(n)} of {int(f)} sessions)"
              for m, n, f in zip(d["model"], d["n_sessions"], full)]
    return pd.DataFrame({"model": series, "level": d["estimator"].map(LADDER_LEVELS),
                         "cbf": d["CBF"], "se": d["SE"].fillna(0.0)}).reset_index(drop=True)


# ----------------------------------------------------------------------------- R4
def r4_from_scores(sessions: pd.DataFrame, heldout: pd.DataFrame) -> pd.DataFrame:
    """R4 adaptive selection vs always-ZS vs best-of-two (paper §4.3, §E.10), twice:
    `observed` on mean session CBF over the sessions with an LSA profile (selection and
    evaluation on the same scored outcomes),
    `held-out` selecting on train-half CBF and evaluating 1 − MAE on the test half."""
    # paired: only sessions where LSA was asked (prompted_sessions may cover a subset)
    lsa_sessions = sessions.loc[sessions["estimator"] == "LSA", ["model", "session_id"]]
    paired = sessions.merge(lsa_sessions, on=["model", "session_id"])
    m = paired.groupby(["model", "estimator"])["CBF"].mean().unstack("estimator")
    need = {"NoMemory", "ZS", "LSA"}
    if not need <= set(m.columns):
        raise ValueError(f"R4 needs session scores of {sorted(need)}; have {sorted(m.columns)}")
    obs = C.r4_table(m[["NoMemory", "ZS", "LSA"]].reset_index()).assign(setting="observed")
    rows = []
    for model, g in heldout.groupby("model", sort=False):
        h = g.set_index("estimator")
        if not {"NoMemory", "ZS", "LSA"} <= set(h.index):
            continue
        train = h["cbf_train"]
        test = 1.0 - h["mae_test"]
        choice, _ = C.r4_select(train["ZS"], train["NoMemory"], train["LSA"])
        rows.append({"model": model, "NoMemory": test["NoMemory"], "ZS": test["ZS"],
                     "LSA": test["LSA"], "R4_choice": choice,
                     "R4": test["ZS"] if choice == "ZS" else test["LSA"],
                     "always_ZS": test["ZS"], "best_of_two": max(test["ZS"], test["LSA"])})
    parts = [obs]
    if rows:
        ho = pd.DataFrame(rows)
        num = ["NoMemory", "ZS", "LSA", "R4", "always_ZS", "best_of_two"]
        mean = {"model": "mean", **ho[num].mean().to_dict(),
                "R4_choice": f"ZS on {int((ho['R4_choice'] == 'ZS').sum())}/{len(ho)}"}
        parts.append(pd.concat([ho, pd.DataFrame([mean])], ignore_index=True).assign(setting="held-out"))
    out = pd.concat(parts, ignore_index=True)
    return out[["setting", "model", "R4_choice", "R4", "always_ZS", "best_of_two", "NoMemory",
                "ZS", "LSA"]]


# ----------------------------------------------------------------------------- others
def grid_table(grid: pd.DataFrame) -> pd.DataFrame:
    """Noise x coverage grid: mean session CBF per (model, flip, coverage) x estimator."""
    return _pivot(grid, ["model", "flip", "coverage"]).sort_values(
        ["model", "flip", "coverage"], ascending=[True, True, False]).reset_index(drop=True)


def partition_table(parts: pd.DataFrame) -> pd.DataFrame:
    """Mean session CBF per (model, partition) x estimator (random partitions: mean over
    repeats, `random_sd` the spread of the best estimator's CBF over repeats), with each
    row's best estimator, so ranking changes across partitions are visible (§E.6)."""
    per_rep = parts.groupby(["model", "partition", "repeat", "estimator"], sort=False)["CBF"].mean().reset_index()
    w = _pivot(per_rep, ["model", "partition"])
    ests = [c for c in w.columns if c not in ("model", "partition")]
    cand = [e for e in ests if e != "NoMemory"]
    w["best"] = w[cand].idxmax(axis=1)
    w["n_groups"] = parts.groupby(["model", "partition"], sort=False)["n_domains"].mean().reindex(
        pd.MultiIndex.from_frame(w[["model", "partition"]])).to_numpy()
    sd = per_rep.groupby(["model", "partition", "estimator"])["CBF"].std()
    w["random_sd"] = [sd.get((m, p, b), np.nan) if p == "random" else np.nan
                      for m, p, b in zip(w["model"], w["partition"], w["best"])]
    return w


def controls_table(ctrl: pd.DataFrame) -> pd.DataFrame:
    """Matched-input control: mean CBF per (model, scope, condition, label coverage) x
    estimator, observed vs corrected vs clean labels (§4.2, §E.5)."""
    w = _pivot(ctrl, ["model", "scope", "condition", "coverage"])
    order = {c: i for i, c in enumerate(C.LABEL_CONDITIONS)}
    return w.assign(_o=w["condition"].map(order)).sort_values(
        ["model", "scope", "_o"], ascending=[True, False, True]).drop(columns="_o").reset_index(drop=True)


def decoder_table(dec: pd.DataFrame) -> pd.DataFrame:
    cols = ["model", "user", "rules", "n_turns", "coverage", "precision", "recall",
            "precision_positive", "precision_negative", "intent_agreement", "global_best_share"]
    cbf = [c for c in dec.columns if c.startswith("CBF_")]
    return dec[[c for c in cols if c in dec.columns] + cbf].reset_index(drop=True)


def simulators_table(sim: pd.DataFrame) -> pd.DataFrame:
    if sim.empty:
        return pd.DataFrame(columns=["model", "user", "coverage", "accuracy"])
    w = _pivot(sim, ["model", "user"])
    meta = sim.groupby(["model", "user"])[["coverage", "accuracy"]].first()
    meta["n_sessions"] = sim.groupby(["model", "user"])["session_id"].nunique()
    return w.merge(meta.reset_index(), on=["model", "user"])


# ----------------------------------------------------------------------------- writing
def _read(paths: Sequence[str]) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in paths]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


NOTES = {
    "main": ("Session CBF = 1 − mean |p̂_d − a_d| over domains with >= 2 answers, averaged over "
             "sessions; SE and CI from the session bootstrap. b = signed bias (positive = "
             "overestimation), e_shape = centred shape error. ZS / LSA / GT-SelfStats are "
             "prompted (the answering model itself if it is a chat model, else the configured "
             "prompted model); `unparsable` = share of sessions whose JSON profile could not be "
             "parsed (0.5 filled in, counted, not dropped). LSA-clean: LSA on histories with "
             "clean verdicts (CBF only, as the paper's Table 24). ECE / AUROC are those of each "
             "estimator's turn confidences: ZS and GT-SelfStats return the recorded answer "
             "confidence (the authors' baselines), over the sessions each was asked on; LSA's are its per-turn "
             "queries (empty for sessions not queried). kendall_tau is empty where a profile is constant across domains "
             "(NoMemory, Global): τ is undefined there (the paper's §D.4). Answers: a chat model answers "
             "every turn afresh in the authors' session format (ladder.answer_format, answer_temperature, "
             "answer_max_new_tokens, answer_per_turn); a base model by cloze, once per question."),
    "tiers": ("Tiers: the authors' own per-model tiers (their released sessions' metadata) where "
              "ladder.tiers gives them, else the model's accuracy on the pool (top third strong, then mid, "
              "then weak); accuracy = the sessions' answer accuracy in the tier."),
    "controls": ("Matched input: observed = the decoded labels; corrected = every decoded "
                 "label replaced by the true outcome (missing stays missing); clean = the true "
                 "outcome on every turn. The estimators are refitted under each; LSA is prompted "
                 "per session on the observed and the clean history only (the paper's Table 24), "
                 "so its corrected and pooled cells are empty."),
    "partitions": ("domain: the pool's domains; semantic: 4 subject categories (MMLU's, or the mini "
                   "world's fields grouped by subject); random: seeded random groups of the "
                   "semantic sizes, mean over repeats (random_sd: their sd; empty for the fixed "
                   "partitions). n_groups: the groups a session scores (those with >= 2 answers), mean "
                   "over sessions (and repeats); a session of a few turns meets only some of the groups."),
    "decoder": ("Feedback decoder against the simulated user's intent, per model and user: coverage = share "
                "of turns with a decoded verdict; precision / recall of the decoded verdicts (overall and per "
                "sign); intent_agreement = share of decoded verdicts equal to the user's intent; "
                "global_best_share and CBF_* from the decoded feedback."),
    "prefix": ("Mean session CBF of each estimator fitted on the first `prefix` turns of every session "
               "(ladder.prefix_step apart), per condition: how fast each estimator's profile converges."),
    "simulators": ("Mean session CBF per estimator with each simulated user (rule-based and LLM users, "
                   "ladder.user / llm_user_model / user_models); coverage = share of turns with feedback, "
                   "accuracy = the sessions' answer accuracy, n_sessions = sessions run with that user."),
    "answers": "Answer accuracy of each model on the session pool (the turns' recorded correctness).",
    "noise_grid": "Clean labels thinned to the coverage and flipped at the flip rate (exact shares per session).",
    "r4": ("R4 chooses ZS when its CBF beats NoMemory, else LSA. observed: mean session CBF "
           "(outcome-informed selection); held-out: selection on the train half, value = 1 − "
           "MAE on the test half. best_of_two is a reference, not a predictor."),
    "heldout": ("Profiles from the decoded feedback on each domain's train-half questions predict test-half "
                "accuracy (MAE, lower is better); R4's held-out variant (§E.10) selects on their train-half CBF. "
                "Table 34 (table34) is the held-out prediction from recorded outcomes."),
    "pooled_pairs": ("Pooled CBF(Global) − CBF(other) with paired question-cluster bootstrap, "
                     "estimators refitted on each resample."),
}


TITLES = {
    "main": "LADDER main table: session CBF, bias, shape error and answer-level ECE / AUROC per model and estimator",
    "decoder": "LADDER feedback decoder: coverage, precision and recall of the decoded verdicts",
    "noise_grid": "LADDER noise x coverage grid: mean session CBF under flipped and thinned feedback",
    "partitions": "LADDER partitions: mean session CBF per estimator by domain, semantic and random grouping",
    "r4": "LADDER R4 adaptive selection against always-ZS and best-of-two",
    "controls": "LADDER matched-input controls: CBF on observed, corrected and clean labels",
    "tiers": "LADDER subject tiers: pooled CBF per estimator in strong, mid and weak tiers",
    "prefix": "LADDER prefix curves: mean session CBF after the first turns of each session",
    "heldout": "LADDER held-out prediction: test-half MAE of profiles fitted on the train half",
    "simulators": "LADDER simulated users: mean session CBF per estimator with each user simulator",
    "pooled_pairs": "LADDER pooled pairs: CBF(Global) minus each estimator's, question-cluster bootstrap",
    "answers": "LADDER answers: answer accuracy of each model on the session pool",
}


def stated_by(config: Mapping, models: Sequence[str]) -> dict[str, str]:
    """Who states each model's prompted levels (ZS, LSA, GT-SelfStats): a chat model itself,
    a base LM the configured `ladder.prompted_model`."""
    from selfknow.config import is_chat

    specs = {m["name"]: m for m in config["models"]}
    prompted = config["ladder"].get("prompted_model") or ""
    return {m: m if m not in specs or is_chat(specs[m]) else (prompted or m) for m in models}


def main_note(main: pd.DataFrame, stated_by: Mapping[str, str]) -> str:
    """The main table's note drawn from its numbers: who stated each model's prompted levels,
    how many sessions each estimator rests on, and whether ZS and GT-SelfStats, which both
    return the recorded answer confidence, have equal ECE / AUROC (they do only when both rest
    on the same sessions)."""
    out = []
    for model in main["model"].drop_duplicates():
        who = stated_by.get(model, model)
        if who != model:
            out.append(f"{model}'s prompted levels (ZS, LSA, GT-SelfStats) were stated by {who}, not by {model}.")
    counts = main.groupby("n_sessions")["estimator"].unique()
    if len(counts) > 1:
        out.append("Sessions per estimator: " + "; ".join(
            f"{int(n)}: {', '.join(sorted(map(str, e)))}" for n, e in counts.items())
            + " (fewer sessions: ladder.prompted_sessions; compare estimators on the same sessions).")
    for model, g in main.groupby("model", sort=False):
        h = g.set_index("estimator")
        if {"ZS", "GT-SelfStats"} <= set(h.index) and {"ECE", "AUROC"} <= set(h.columns):
            a, b = h.loc["ZS", ["ECE", "AUROC"]].to_numpy(float), h.loc["GT-SelfStats", ["ECE", "AUROC"]].to_numpy(float)
            same = bool(np.allclose(a, b, equal_nan=True))
            out.append(f"{model}: ZS ECE / AUROC {a[0]:.3f} / {a[1]:.3f}, GT-SelfStats {b[0]:.3f} / {b[1]:.3f} "
                       f"({'equal' if same else 'not equal: they rest on different sessions'}).")
    return " ".join(out)


def r4_note(sessions: pd.DataFrame) -> str:
    """How many sessions R4's observed rows rest on: those with an LSA profile."""
    lsa = sessions.loc[sessions["estimator"] == "LSA"].groupby("model")["session_id"].nunique()
    every = sessions.groupby("model")["session_id"].nunique()
    return "Observed rows rest on the sessions with an LSA profile: " + "; ".join(
        f"{m}: {int(lsa.get(m, 0))} of {int(n)} sessions" for m, n in every.items()) + "."


def write_tables(parts: Mapping[str, Sequence[str]], tables: Mapping[str, str],
                 figures: Mapping[str, str], provenance: dict | None = None, modes_note: str = "",
                 stated_by: Mapping[str, str] | None = None) -> dict:
    """Read every model's score parts (`parts[name]` = list of parquet paths) and write each
    table in TABLES to `tables["<name>_csv"]` / `tables["<name>_md"]` and each figure in
    FIGURES to `figures[name]`; with `provenance`, each gets its sidecar; `modes_note`
    (selfknow.models.providers.modes_note: the prompted levels' reply modes) ends the main table's note;
    `stated_by` maps a model to the model that answered its prompted levels (the prompted
    model for a base LM), said in the main table's note."""
    from selfknow.report.figures import accuracy_vs_cbf, cbf_matrix, ladder_plot, reliability_bins
    from selfknow.report.tables import write_table

    P = {k: _read(v) for k, v in parts.items()}
    main = main_table(P["sessions"], P["bootstrap"])
    heldout = _pivot(P["heldout"], ["model"], "mae_test")
    built = {
        "main": main,
        "decoder": decoder_table(P["decoder"]),
        "noise_grid": grid_table(P["grid"]),
        "partitions": partition_table(P["partitions"]),
        "r4": r4_from_scores(P["sessions"], P["heldout"]),
        "controls": controls_table(P["controls"]),
        "tiers": _pivot(P["tiers"], ["model", "tier"]).merge(
            P["tiers"].groupby(["model", "tier"])[["accuracy", "n_domains"]].first().reset_index(),
            on=["model", "tier"]),
        "prefix": _pivot(P["prefix"], ["model", "condition", "prefix"]),
        "heldout": heldout,
        "simulators": simulators_table(P["simulators"]),
        "pooled_pairs": P["pairs"].reset_index(drop=True) if len(P["pairs"]) else pd.DataFrame(
            columns=["model", "estimator_a", "estimator_b", "estimate", "se"]),
        "answers": P["answers"].reset_index(drop=True),
    }
    derived = {"main": main_note(main, stated_by or {}), "r4": r4_note(P["sessions"])}
    for name in TABLES:
        write_table(built[name], tables[f"{name}_csv"], tables[f"{name}_md"],
                    title=TITLES.get(name, f"LADDER {name.replace('_', ' ')}"), provenance=provenance,
                    notes=" ".join(filter(None, [NOTES.get(name, ""), derived.get(name, ""),
                                                 modes_note if name == "main" else ""])))
    ladder_plot(ladder_frame(main), figures["figure4"], provenance=provenance)
    acc = P["answers"].set_index("model")["accuracy"]
    f5 = main[main["estimator"].isin(FIG5_ESTIMATORS)]
    accuracy_vs_cbf(pd.DataFrame({"model": f5["model"], "estimator": f5["estimator"],
                                  "accuracy": f5["model"].map(acc), "cbf": f5["CBF"]}), figures["figure5"],
                    provenance=provenance)
    cbf_matrix(main.rename(columns={"estimator": "baseline", "CBF": "cbf"})[["model", "baseline", "cbf"]],
               figures["figure6"], provenance=provenance)
    reliability_bins(P["reliability"], figures["figure7"], provenance=provenance)
    return {"tables": len(TABLES), "figures": len(FIGURES), "models": int(main["model"].nunique())}


#: estimators of the importer by default: the authors' released offline baselines plus Global
#: and Count (cheap); Dawid-Skene / GLAD refit per turn for their query confidences, which on
#: 250 released sessions costs minutes, so they are opt-in via ladder.import_estimators
IMPORT_ESTIMATORS = ["NoMemory", "OraclePDC", "UF-PDC", "Platt-Online", "HistBin-Online",
                     "Bayes-Domain", "EM-Joint", "Global", "Count"]


def import_job(sources: str | Sequence[str], out_csv: str, out_md: str, estimators: Sequence[str] | None = None, *,
               out_sessions: str | None = None, provenance: dict | None = None) -> dict:
    """The session importer (SPEC §2): the session files of `sources` (released
    `capbound_sessions_*.json` and session tables, `records.import_sessions`) scored with
    estimators that need no live model call, per session (written to `out_sessions` if given,
    unrounded), averaged over sessions with the authors' rounding -> model, baseline, CBF,
    ECE, Brier, AUROC, HR; written as a table (`selfknow.report.tables.write_table`)."""
    from selfknow.records import write_csv
    from selfknow.report.tables import write_table

    from .aggregate import authors_aggregates, score_sessions
    from .records import import_sessions

    turns = import_sessions(sources)
    per = score_sessions(turns, list(estimators or IMPORT_ESTIMATORS), "frozen")
    agg = authors_aggregates(per)
    where = sources if isinstance(sources, str) else ", ".join(map(str, sources))
    write_table(agg, out_csv, out_md, title="LADDER sessions: aggregates per model and baseline",
                notes=f"Recomputed from the sessions in {where} (estimators that need no live model call), "
                      "each session's metrics rounded as the authors' scorer rounds them, averaged over sessions.",
                provenance=provenance)
    if out_sessions is not None:
        write_csv(per, out_sessions)
    return {"models": int(agg["model"].nunique()), "rows": len(agg),
            "sessions": len(per[["model", "session_id"]].drop_duplicates())}
