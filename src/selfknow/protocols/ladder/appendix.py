"""LADDER appendix tables and figures built from outputs the LADDER jobs already wrote (no
model call): Table 18 (clean-label optimisation of GLAD-style and Dawid-Skene, §E.1), Table 33
(the lite protocol, §F.3), Figure 9 (accuracy, recorded-confidence ECE and NoMemory CBF
across the panel, §D.4) and Figure 11 (R4 and the reliability-aware estimators, §E.10).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from selfknow.records import read_parquet
from selfknow.report.tables import Built

from .catalog import APPENDIX_ENTRIES
from .lite import lite_runs, lite_table
from .tables import _read, r4_from_scores, summary

#: Figure 11's estimators at the session and the pooled scoring unit (paper §E.10: the
#: reliability-aware estimators against the prior, the constant and the global mean)
FIG11_SESSION = ["NoMemory", "ZS", "Global", "Dawid-Skene", "GLAD"]
FIG11_POOLED = ["Global", "Dawid-Skene", "GLAD"]
FIG11_R4 = ["NoMemory", "ZS", "LSA", "R4", "best_of_two"]


def optimisation_table(opt: pd.DataFrame) -> pd.DataFrame:
    """Table 18: per model, estimator and setting (fixed budget / optimised), the session means
    of clean-label CBF, signed bias and log-likelihood per label, the share of sessions whose
    fit stopped on its tolerance, the mean iterations and the sessions."""
    g = opt.groupby(["model", "estimator", "setting"], sort=False)
    out = g[["CBF", "bias", "loglik", "n_iter"]].mean()
    out["converged"] = g["converged"].mean()
    out["n_sessions"] = g["session_id"].nunique()
    return out.reset_index()[["model", "estimator", "setting", "CBF", "bias", "loglik", "converged",
                              "n_iter", "n_sessions"]]


def run_name(turns: pd.DataFrame) -> str:
    """A run configuration's name: its model and simulated user ("rules" or the LLM user)."""
    return f"{turns['model'].iloc[0]} / user {turns['user_model'].astype(str).iloc[0]}"


def figure9_frame(main_sessions: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """Figure 9's bars (panel, model, series, value): per model, ordered by answer accuracy,
    the answer accuracy, the recorded confidence's ECE and NoMemory's mean session CBF."""
    nm = main_sessions[main_sessions["estimator"] == "NoMemory"].groupby("model")["CBF"].mean()
    a = answers.set_index("model").sort_values("accuracy")
    rows = []
    for panel, values in (("(a) answer accuracy", a["accuracy"]),
                          ("(b) recorded-confidence ECE", a["ECE"]),
                          ("(c) NoMemory session CBF", nm.reindex(a.index))):
        rows += [{"panel": panel, "model": m, "series": "", "value": float(v)} for m, v in values.items()]
    return pd.DataFrame(rows)


def figure11_frame(sessions: pd.DataFrame, heldout: pd.DataFrame, controls: pd.DataFrame) -> pd.DataFrame:
    """Figure 11's bars (panel, model, series, value): (a) R4 with its branches and the
    best-of-two reference on the sessions with an LSA profile (the observed rows of the r4
    table); (b) mean session CBF of the reliability-aware estimators against NoMemory, ZS and
    Global; (c) their pooled CBF on the observed labels (the matched-input control)."""
    r4 = r4_from_scores(sessions, heldout)
    r4 = r4[(r4["setting"] == "observed") & (r4["model"] != "mean")]
    a = r4.melt(id_vars="model", value_vars=FIG11_R4, var_name="series")
    a["series"] = a["series"].replace({"best_of_two": "best of two"})
    b = (sessions[sessions["estimator"].isin(FIG11_SESSION)].groupby(["model", "estimator"])["CBF"].mean()
         .reset_index().rename(columns={"estimator": "series", "CBF": "value"}))
    pooled = controls[(controls["scope"] == "pooled") & (controls["condition"] == "observed")
                      & controls["estimator"].isin(FIG11_POOLED)]
    c = pooled.groupby(["model", "estimator"])["CBF"].mean().reset_index().rename(
        columns={"estimator": "series", "CBF": "value"})
    parts = []
    for panel, d, order in (("(a) R4, sessions with an LSA profile", a, FIG11_R4),
                            ("(b) mean session CBF", b, FIG11_SESSION),
                            ("(c) pooled CBF, observed labels", c, FIG11_POOLED)):
        rank = {s.replace("_", " "): i for i, s in enumerate(order)}
        d = d.assign(_o=d["series"].map(rank)).sort_values(["_o", "model"], kind="stable").drop(columns="_o")
        parts.append(d.assign(panel=panel)[["panel", "model", "series", "value"]])
    return pd.concat(parts, ignore_index=True)


def table18(optimisation: pd.DataFrame) -> Built:
    return Built(optimisation_table(optimisation))


def table33(lite: pd.DataFrame, budgets: Sequence[int]) -> Built:
    table = lite_table(lite, budgets)
    return Built(table, summary={"lite_n": int(table["n_configurations"].max())})


def table33_runs(lite: pd.DataFrame) -> Built:
    return Built(lite)


def figure9(sessions: pd.DataFrame, answers: pd.DataFrame, png: str, title: str, provenance: dict | None) -> Built:
    from selfknow.report.figures import bar_panels

    f9 = figure9_frame(sessions, answers)
    bar_panels(f9, png, ylabels=dict(zip(pd.unique(f9["panel"]), ("accuracy", "ECE", "CBF"))), title=title,
               provenance=provenance)
    return Built(f9)


def figure11(sessions: pd.DataFrame, heldout: pd.DataFrame, controls: pd.DataFrame, png: str, title: str,
             provenance: dict | None) -> Built:
    from selfknow.report.figures import bar_panels

    f11 = figure11_frame(sessions, heldout, controls)
    bar_panels(f11, png, ylabels={p: "CBF" for p in pd.unique(f11["panel"])}, title=title, provenance=provenance)
    return Built(f11)


def write_appendix(opt_paths: Sequence[str], run_paths: Sequence[str], parts: Mapping[str, Sequence[str]],
                   outputs: Mapping[str, str], *, budgets: Sequence[int], provenance: dict | None = None) -> dict:
    """Read every model's optimisation part (`opt_paths`), every run configuration's session
    turns (`run_paths`) and the score parts `parts` (sessions, answers, heldout, controls), and
    write each table and figure of the catalog's job "appendix" (`catalog.APPENDIX_ENTRIES`,
    through `selfknow.report.tables.write_entries`): a table to `outputs["<name>_csv"]` /
    `outputs["<name>_md"]`, a figure to `outputs[name]` (with sidecars when `provenance` is
    given); `budgets` are Table 33's record budgets (lite, full)."""
    from selfknow.report.tables import write_entries

    runs = {}
    for p in run_paths:
        turns = read_parquet(p)
        if len(turns):
            runs[run_name(turns)] = turns
    known = {**{k: _read(v) for k, v in parts.items()}, "optimisation": _read(opt_paths),
             "lite": lite_runs(runs, budgets), "budgets": list(budgets)}
    built = write_entries(APPENDIX_ENTRIES, known, outputs, provenance=provenance)
    figures = sum(t.figure for t in APPENDIX_ENTRIES)
    return {"tables": len(built) - figures, "figures": figures, "runs": len(runs), **summary(built)}
