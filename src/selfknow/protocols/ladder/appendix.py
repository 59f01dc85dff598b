"""LADDER appendix tables and figures built from outputs the LADDER jobs already wrote (no
model call): Table 18 (clean-label optimisation of GLAD-style and Dawid-Skene, §E.1), Table 33
(the lite protocol, §F.3), Figure 9 (accuracy, recorded-confidence ECE and NoMemory CBF
across the panel, §D.4) and Figure 11 (R4 and the reliability-aware estimators, §E.10).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from selfknow.report.catalog import names
from selfknow.records import read_parquet

from .catalog import TABLE as ENTRY
from .catalog import TABLES as CATALOG
from .lite import lite_runs, lite_table
from .tables import _read, r4_from_scores

#: the catalog's tables and figures of `write_appendix`
TABLES = names(CATALOG, job="appendix", figure=False)
FIGURES = names(CATALOG, job="appendix", figure=True)
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


def write_appendix(opt_paths: Sequence[str], run_paths: Sequence[str], parts: Mapping[str, Sequence[str]],
                   tables: Mapping[str, str], figures: Mapping[str, str], *, budgets: Sequence[int],
                   provenance: dict | None = None) -> dict:
    """Read every model's optimisation part (`opt_paths`), every run configuration's session
    turns (`run_paths`) and the score parts `parts` (sessions, answers, heldout, controls),
    and write TABLES to `tables["<name>_csv"]` / `tables["<name>_md"]` and FIGURES to
    `figures[name]` (with sidecars when `provenance` is given)."""
    from selfknow.report.figures import bar_panels
    from selfknow.report.tables import write_table

    P = {k: _read(v) for k, v in parts.items()}
    runs = {}
    for p in run_paths:
        turns = read_parquet(p)
        if len(turns):
            runs[run_name(turns)] = turns
    runs_df = lite_runs(runs, budgets)
    built = {"table18": optimisation_table(_read(opt_paths)),
             "table33": lite_table(runs_df, budgets),
             "table33_runs": runs_df}
    for name in TABLES:
        t = ENTRY[name]
        write_table(built[name], tables[f"{name}_csv"], tables[f"{name}_md"], title=t.title.format(budgets=budgets),
                    notes=t.notes, provenance=provenance)
    f9 = figure9_frame(P["sessions"], P["answers"])
    bar_panels(f9, figures["figure9"], ylabels=dict(zip(pd.unique(f9["panel"]), ("accuracy", "ECE", "CBF"))),
               title=ENTRY["figure9"].title, provenance=provenance)
    f11 = figure11_frame(P["sessions"], P["heldout"], P["controls"])
    bar_panels(f11, figures["figure11"], ylabels={p: "CBF" for p in pd.unique(f11["panel"])},
               title=ENTRY["figure11"].title, provenance=provenance)
    return {"tables": len(TABLES), "figures": len(FIGURES), "runs": len(runs),
            "lite_n": int(built["table33"]["n_configurations"].max())}
