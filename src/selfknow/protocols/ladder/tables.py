"""LADDER tables and figures (SPEC §2 "Targets"), assembled from every model's score parts
(`catalog.SCORE_PARTS`). Pure frame builders (`main_table`, `r4_from_scores`, ...) plus
`write_tables`, which reads the parts and writes every CSV/Markdown table and PNG figure.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.config import stated_by  # noqa: F401  (the ladder rule jobs take it from here)
from selfknow.report.findings import Claim
from selfknow.report.tables import Built

from . import controls as C
from .catalog import IMPORT_ENTRIES, TABLES_ENTRIES
from .jobs import LEVELS

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
def grid_table(grid: pd.DataFrame) -> Built:
    """Noise x coverage grid: mean session CBF per (model, flip, coverage) x estimator."""
    return Built(_pivot(grid, ["model", "flip", "coverage"]).sort_values(
        ["model", "flip", "coverage"], ascending=[True, True, False]).reset_index(drop=True))


def partition_table(partitions: pd.DataFrame) -> Built:
    """Mean session CBF per (model, partition) x estimator (random partitions: mean over
    repeats, `random_sd` the spread of the best estimator's CBF over repeats), with each
    row's best estimator, so ranking changes across partitions are visible (§E.6)."""
    parts = partitions
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
    return Built(w)


def controls_table(controls: pd.DataFrame) -> Built:
    """Matched-input control: mean CBF per (model, scope, condition, label coverage) x
    estimator, observed vs corrected vs clean labels (§4.2, §E.5)."""
    w = _pivot(controls, ["model", "scope", "condition", "coverage"])
    order = {c: i for i, c in enumerate(C.LABEL_CONDITIONS)}
    return Built(w.assign(_o=w["condition"].map(order)).sort_values(
        ["model", "scope", "_o"], ascending=[True, False, True]).drop(columns="_o").reset_index(drop=True))


def decoder_table(decoder: pd.DataFrame) -> Built:
    dec = decoder
    cols = ["model", "user", "rules", "n_turns", "coverage", "precision", "recall",
            "precision_positive", "precision_negative", "intent_agreement", "global_best_share"]
    cbf = [c for c in dec.columns if c.startswith("CBF_")]
    return Built(dec[[c for c in cols if c in dec.columns] + cbf].reset_index(drop=True))


def simulators_table(simulators: pd.DataFrame) -> Built:
    sim = simulators
    if sim.empty:
        return Built(pd.DataFrame(columns=["model", "user", "coverage", "accuracy"]))
    w = _pivot(sim, ["model", "user"])
    meta = sim.groupby(["model", "user"])[["coverage", "accuracy"]].first()
    meta["n_sessions"] = sim.groupby(["model", "user"])["session_id"].nunique()
    return Built(w.merge(meta.reset_index(), on=["model", "user"]))


# ----------------------------------------------------------------------------- writing
def _read(paths: Sequence[str]) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in paths]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


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


def lsa_clean_note(sessions: pd.DataFrame, stated_by: Mapping[str, str]) -> str:
    """Per model whose LSA-clean scores equal LSA's on every session both were asked on (CBF,
    bias, shape error): the clean-label control cannot differ there, since the prompted model's
    profiles did not change with the feedback, which the note says instead of reading a null."""
    out = []
    cols = [c for c in ("CBF", "bias", "shape_error") if c in sessions.columns]
    for model, g in sessions.groupby("model", sort=False):
        w = {e: g[g["estimator"] == e].set_index("session_id")[cols] for e in ("LSA", "LSA-clean")}
        shared = w["LSA"].index.intersection(w["LSA-clean"].index)
        if len(shared) and np.allclose(w["LSA"].loc[shared].to_numpy(float), w["LSA-clean"].loc[shared].to_numpy(float),
                                       rtol=0, atol=1e-12, equal_nan=True):
            out.append(f"{model}: LSA-clean equals LSA on all {len(shared)} sessions (CBF, bias, shape error): "
                       f"{stated_by.get(model, model)}'s profiles did not change between clean and observed "
                       f"histories, so this control cannot differ here and shows nothing.")
    return " ".join(out)


#: what the main table's columns are, the first sentences of its notes paragraph
MAIN_NOTE = (
    "Session CBF = 1 − mean |p̂_d − a_d| over domains with >= 2 answers, averaged over sessions; "
    "SE and CI from the session bootstrap. b = signed bias (positive = overestimation), e_shape = "
    "centred shape error. ZS / LSA / GT-SelfStats are prompted (the answering model itself if it "
    "is a chat model, else the configured prompted model); `unparsable` = share of sessions whose "
    "JSON profile could not be parsed (0.5 filled in, counted, not dropped). LSA-clean: LSA on "
    "histories with clean verdicts (CBF only, as the paper's Table 24). ECE / AUROC are those of "
    "each estimator's turn confidences: ZS and GT-SelfStats return the recorded answer confidence "
    "(the authors' baselines), over the sessions each was asked on; LSA's are its per-turn queries "
    "(empty for sessions not queried). kendall_tau is empty where a profile is constant across "
    "domains (NoMemory, Global): τ is undefined there (the paper's §D.4). Answers: a chat model "
    "answers every turn afresh in the authors' session format (ladder.answer_format, "
    "answer_temperature, answer_max_new_tokens, answer_per_turn); a base model by cloze, once per "
    "question."
)


def main_with_note(sessions: pd.DataFrame, bootstrap: pd.DataFrame, stated_by: Mapping[str, str],
                   modes_note: str) -> Built:
    """The main table; its notes, one paragraph: `MAIN_NOTE`, then what is drawn from it
    (`main_note`), from LSA-clean (`lsa_clean_note`) and from the reply modes."""
    main = main_table(sessions, bootstrap)
    drawn = [main_note(main, stated_by), lsa_clean_note(sessions, stated_by), modes_note]
    return Built(main, (" ".join(filter(None, [MAIN_NOTE, *drawn])),))


#: the levels' claims against NoMemory (session CBF, estimator minus NoMemory); an estimator
#: not listed is compared with no stated direction (`_NO_DIRECTION`)
LEVEL_CLAIMS = {
    "ZS": Claim(1, "\"L1 improves on constant L0 for 14 of 18 models\" (§4.2)"),
    "GT-SelfStats": Claim(1, "\"All 18 complete L4 evaluations reproduce supplied statistics at CBF 1.000\" (§4.2)"),
}
_NO_DIRECTION = Claim(None, "none: Figure 4 shows \"mean session CBF across five levels\" (§4.3) and states no "
                            "ordering of an L2 estimator against L0")
#: second-order (reliability-aware) estimators against the first-order count they refine
SECOND_ORDER = ("Dawid-Skene", "GLAD", "EM-Joint")
FIRST_ORDER = "Count"
_SECOND_ORDER_CLAIM = Claim(None, "none: \"The reliability-aware estimators are also compared at matched session "
                                  "and pooled scoring units\" (§E.10), with no direction; Global \"leads five matched "
                                  "algorithmic controls on 14/18 session-level rows\" (§4.2)")
#: prompted levels: a model states them (`stated_by`)
PROMPTED = ("ZS", "LSA", "GT-SelfStats")
#: fixed by construction, so not compared (OraclePDC's CBF is 1 on every session)
BY_CONSTRUCTION = ("OraclePDC",)
#: controls, not levels (LSA on clean histories: the main table's note says when it cannot differ)
CONTROLS = ("LSA-clean",)


def findings(sessions: pd.DataFrame, stated_by: Mapping[str, str]) -> Built:
    """What the default finds on LADDER (`selfknow.report.findings`): per model, each level's
    session CBF against NoMemory's and each second-order estimator's against Count's, as the
    mean over the sessions both were scored on of the paired difference, with the Student-t
    interval over those sessions. A prompted level's row names the model that stated it."""
    from selfknow.report.findings import LEVEL, frame, row, tally_note
    from selfknow.stats.hypothesis import mean_ci

    rows = []
    for model, g in sessions.groupby("model", sort=False):
        wide = g.pivot_table(index="session_id", columns="estimator", values="CBF", aggfunc="mean")

        def compare(label: str, a: str, b: str, claim: Claim) -> None:
            if {a, b} <= set(wide.columns):
                d = (wide[a] - wide[b]).dropna().to_numpy()
                if d.size:
                    m, lo, hi = mean_ci(d, LEVEL)
                    n = f"{d.size} session{'s' if d.size != 1 else ''}"
                    rows.append(row(f"{model}: {label} (session CBF, {n})", m, lo, hi, claim))

        for est in _est_columns(wide.columns):
            if est in ("NoMemory", *BY_CONSTRUCTION, *CONTROLS):
                continue
            who = f" (stated by {stated_by.get(model, model)})" if est in PROMPTED else ""
            compare(f"{est}{who} − NoMemory", est, "NoMemory", LEVEL_CLAIMS.get(est, _NO_DIRECTION))
        for est in SECOND_ORDER:
            compare(f"{est} − {FIRST_ORDER} (second- vs first-order)", est, FIRST_ORDER, _SECOND_ORDER_CLAIM)
    table = frame(rows)
    return Built(table, (tally_note(table) + " Intervals: Student-t over the sessions both estimators were scored "
                         "on (paired differences of session CBF; none on one session). Not compared: "
                         + ", ".join(BY_CONSTRUCTION) + " (CBF 1 on every session by construction) and the control "
                         + ", ".join(CONTROLS) + " (the main table).",))


#: what R4's rows are, the first sentences of its notes paragraph
R4_NOTE = (
    "R4 chooses ZS when its CBF beats NoMemory, else LSA. observed: mean session CBF "
    "(outcome-informed selection); held-out: selection on the train half, value = 1 − MAE on the "
    "test half. best_of_two is a reference, not a predictor."
)


def r4_with_note(sessions: pd.DataFrame, heldout: pd.DataFrame, stated_by: Mapping[str, str]) -> Built:
    """R4's table; its notes, one paragraph: `R4_NOTE`, which sessions the observed rows rest on
    and, for the held-out rows, what the prompted held-out values rest on (`heldout_note`)."""
    ho = heldout_note(heldout, stated_by)
    return Built(r4_from_scores(sessions, heldout),
                 (f"{R4_NOTE} {r4_note(sessions)}" + (f" Held-out rows: {ho}" if ho else ""),))


def tiers_table(tiers: pd.DataFrame) -> Built:
    return Built(_pivot(tiers, ["model", "tier"]).merge(
        tiers.groupby(["model", "tier"])[["accuracy", "n_domains"]].first().reset_index(), on=["model", "tier"]))


def prefix_table(prefix: pd.DataFrame) -> Built:
    return Built(_pivot(prefix, ["model", "condition", "prefix"]))


#: a prompted level's held-out value stating fewer than this share of the test domains rests on
#: a few of them (each domain it leaves out counts 0.5, NoMemory's value): the note says so
MIN_STATED_SHARE = 0.25


def heldout_note(heldout: pd.DataFrame, stated_by: Mapping[str, str]) -> str:
    """What a held-out value of a prompted level rests on (`jobs._heldout`): the note names
    those whose profile states fewer than `MIN_STATED_SHARE` of the test domains and those whose
    paired difference from NoMemory does not exclude 0 (`selfknow.report.findings.verdict`)."""
    from selfknow.report.findings import NO_DIFFERENCE, UNDECIDED, interval_text, signed, verdict

    few, same = [], []
    for r in heldout[heldout["estimator"].isin(PROMPTED)].itertuples(index=False):
        level = f"{r.model}: {r.estimator} (stated by {stated_by.get(r.model, r.model)})"
        if r.n_stated < MIN_STATED_SHARE * r.n_domains:
            few.append(f"{level} states {int(r.n_stated)} of {int(r.n_domains)} test domains")
        if verdict(r.vs_nomemory_lo, r.vs_nomemory_hi, None) in (UNDECIDED, NO_DIFFERENCE):
            same.append(f"{level} − NoMemory {signed(r.vs_nomemory)} "
                        f"{interval_text(r.vs_nomemory_lo, r.vs_nomemory_hi)}")
    notes = []
    if few:
        share = f"{MIN_STATED_SHARE:.0%}".replace("%", " %")
        notes.append(f"Resting on fewer than {share} of the domains, so close to NoMemory by construction: "
                     + "; ".join(few) + ".")
    if same:
        notes.append("Not different from NoMemory (paired difference of the absolute errors over the test "
                     "domains, 95 % Student-t interval including 0): " + "; ".join(same) + ".")
    return " ".join(notes)


#: what the held-out table's rows are, the first sentences of its notes paragraph
HELDOUT_NOTE = (
    "Profiles from the decoded feedback on each domain's train-half questions predict test-half "
    "accuracy (MAE, lower is better); R4's held-out variant (§E.10) selects on their train-half "
    "CBF. <level> domains: the test domains (>= 2 test answers) a prompted level's profile states; "
    "a domain it leaves out counts 0.5, NoMemory's value. Table 34 (table34) is the held-out "
    "prediction from recorded outcomes."
)


def heldout_with_note(heldout: pd.DataFrame, stated_by: Mapping[str, str]) -> Built:
    """Test-half MAE per model x estimator, with "<level> domains" (stated of scored test
    domains) for each prompted level; its notes, one paragraph: `HELDOUT_NOTE`, then
    `heldout_note`."""
    table = _pivot(heldout, ["model"], "mae_test")
    for r in heldout[heldout["estimator"].isin(PROMPTED)].itertuples(index=False):
        table.loc[table["model"] == r.model, f"{r.estimator} domains"] = f"{int(r.n_stated)} of {int(r.n_domains)}"
    return Built(table, (" ".join(filter(None, [HELDOUT_NOTE, heldout_note(heldout, stated_by)])),))


def pooled_pairs_table(pairs: pd.DataFrame) -> Built:
    return Built(pairs.reset_index(drop=True) if len(pairs) else pd.DataFrame(
        columns=["model", "estimator_a", "estimator_b", "estimate", "se"]))


def answers_table(answers: pd.DataFrame) -> Built:
    return Built(answers.reset_index(drop=True))


def figure4(main: pd.DataFrame, png: str, title: str, provenance: dict | None) -> Built:
    from selfknow.report.figures import ladder_plot

    data = ladder_frame(main)
    ladder_plot(data, png, title=title, provenance=provenance)
    return Built(data)


def figure5(main: pd.DataFrame, answers: pd.DataFrame, png: str, title: str, provenance: dict | None) -> Built:
    from selfknow.report.figures import accuracy_vs_cbf

    acc = answers.set_index("model")["accuracy"]
    f5 = main[main["estimator"].isin(FIG5_ESTIMATORS)]
    data = pd.DataFrame({"model": f5["model"], "estimator": f5["estimator"], "accuracy": f5["model"].map(acc),
                         "cbf": f5["CBF"]})
    accuracy_vs_cbf(data, png, title=title, provenance=provenance)
    return Built(data)


def figure6(main: pd.DataFrame, png: str, title: str, provenance: dict | None) -> Built:
    from selfknow.report.figures import cbf_matrix

    data = main.rename(columns={"estimator": "baseline", "CBF": "cbf"})[["model", "baseline", "cbf"]]
    cbf_matrix(data, png, title=title, provenance=provenance)
    return Built(data)


def figure7(reliability: pd.DataFrame, png: str, title: str, provenance: dict | None) -> Built:
    from selfknow.report.figures import reliability_bins

    reliability_bins(reliability, png, title=title, provenance=provenance)
    return Built(reliability)


def summary(built: Mapping[str, Built]) -> dict:
    """A job's summary: what each entry it built reports (`Built.summary`), in catalog order."""
    return {k: v for b in built.values() for k, v in b.summary.items()}


def write_tables(parts: Mapping[str, Sequence[str]], outputs: Mapping[str, str], provenance: dict | None = None,
                 modes_note: str = "", stated_by: Mapping[str, str] | None = None) -> dict:
    """Read every model's score parts (`parts[name]` = list of parquet paths) and write each
    table and figure of the catalog's job "tables" (`catalog.TABLES_ENTRIES`, through
    `selfknow.report.tables.write_entries`): a table to `outputs["<name>_csv"]` /
    `outputs["<name>_md"]`, a figure to `outputs[name]`; with `provenance`, each gets its
    sidecar; `modes_note` (selfknow.models.providers.modes_note: the prompted levels' reply
    modes) ends the main table's note; `stated_by` maps a model to the model that answered its
    prompted levels (the prompted model for a base LM), said in the main table's note."""
    from selfknow.report.tables import write_entries

    known = {k: _read(v) for k, v in parts.items()}
    known.update(stated_by=stated_by or {}, modes_note=modes_note)
    built = write_entries(TABLES_ENTRIES, known, outputs, provenance=provenance)
    figures = sum(t.figure for t in TABLES_ENTRIES)
    return {"tables": len(built) - figures, "figures": figures, "models": int(built["main"].table["model"].nunique())}


#: estimators of the importer by default: the authors' released offline baselines plus Global
#: and Count (cheap); Dawid-Skene / GLAD refit per turn for their query confidences, which on
#: 250 released sessions costs minutes, so they are opt-in via ladder.import_estimators
IMPORT_ESTIMATORS = ["NoMemory", "OraclePDC", "UF-PDC", "Platt-Online", "HistBin-Online",
                     "Bayes-Domain", "EM-Joint", "Global", "Count"]


def import_table(per: pd.DataFrame, where: str) -> Built:
    """The importer's table: the per-session scores `per` (`aggregate.score_sessions`) of the
    sessions in `where`, averaged over sessions with the authors' rounding -> model, baseline,
    CBF, ECE, Brier, AUROC, HR."""
    from .aggregate import authors_aggregates

    agg = authors_aggregates(per)
    return Built(agg, (f"Recomputed from the sessions in {where} (estimators that need no live model call), "
                       "each session's metrics rounded as the authors' scorer rounds them, averaged over sessions.",),
                 summary={"models": int(agg["model"].nunique()), "rows": len(agg),
                          "sessions": len(per[["model", "session_id"]].drop_duplicates())})


def import_job(sources: str | Sequence[str], outputs: Mapping[str, str], estimators: Sequence[str] | None = None, *,
               out_sessions: str | None = None, provenance: dict | None = None) -> dict:
    """The session importer (SPEC §2): the session files of `sources` (released
    `capbound_sessions_*.json` and session tables, `records.import_sessions`) scored with
    estimators that need no live model call, per session (written to `out_sessions` if given,
    unrounded), and written as the catalog's import table (`import_table`) to
    `outputs["<name>_csv"]` / `outputs["<name>_md"]` (`selfknow.report.tables.write_entries`)."""
    from selfknow.records import write_csv
    from selfknow.report.tables import write_entries

    from .aggregate import score_sessions
    from .records import import_sessions

    per = score_sessions(import_sessions(sources), list(estimators or IMPORT_ESTIMATORS), "frozen")
    where = sources if isinstance(sources, str) else ", ".join(map(str, sources))
    built = write_entries(IMPORT_ENTRIES, {"per": per, "where": where}, outputs, provenance=provenance)
    if out_sessions is not None:
        write_csv(per, out_sessions)
    return summary(built)
