"""Table 33 (paper §F.3): the lite protocol, T = 100 against T = 500 records.

Each recorded run configuration (one session file: a model with one simulated user) is
summarised on its first T records in stream order (sessions in order, turns in order) by the
main table's NoMemory scores: the session means of NoMemory's CBF and of the recorded
confidence's ECE (`aggregate.score_sessions`, a session cut at T scored on its first turns).
The table gives, per metric, the Pearson and Spearman correlations between the lite and the
full summaries across the configurations with at least T_full records. A correlation over
fewer than three configurations, or over values that do not vary, is undefined (NaN) and the
table says why: two points always correlate ±1.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from .aggregate import _ordered, score_sessions

METRICS = ("ECE", "CBF")
#: the fewest configurations a correlation is reported over (two points always give ±1)
MIN_RUNS = 3


def budget_columns(budgets: Sequence[int]) -> list[str]:
    return [f"{m}_T{t}" for m in METRICS for t in budgets]


def lite_runs(runs: Mapping[str, pd.DataFrame], budgets: Sequence[int]) -> pd.DataFrame:
    """One row per run configuration (`runs`: name -> its turn records): records, and the
    session-mean NoMemory ECE and CBF on its first T records for each T in `budgets` (NaN
    when the run has fewer than T records)."""
    rows = []
    for name, turns in runs.items():
        row = {"run": name, "records": len(turns)}
        ordered = _ordered(turns) if len(turns) else turns
        for t in budgets:
            if len(turns) < t:
                row.update({f"{m}_T{t}": np.nan for m in METRICS})
                continue
            s = score_sessions(ordered.iloc[:t], ["NoMemory"])
            row.update({f"{m}_T{t}": float(s[m].mean()) for m in METRICS})
        rows.append(row)
    return pd.DataFrame(rows, columns=["run", "records", *budget_columns(budgets)])


def correlations(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, str]:
    """(Pearson r, Spearman ρ, why undefined or "") of the pairs where both are finite."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < MIN_RUNS:
        return np.nan, np.nan, f"undefined: {x.size} configuration(s) with both budgets, fewer than {MIN_RUNS}"
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan, np.nan, "undefined: a summary is constant across configurations"
    r = float(np.corrcoef(x, y)[0, 1])
    rho = float(np.corrcoef(rankdata(x), rankdata(y))[0, 1])  # average ranks for ties
    return r, rho, ""


def lite_table(runs: pd.DataFrame, budgets: Sequence[int]) -> pd.DataFrame:
    """Per metric: Pearson r and Spearman ρ between the lite (budgets[0]) and full
    (budgets[1]) summaries of `lite_runs`, the configurations they cover, and a note where
    undefined."""
    lo, hi = budgets
    if not 0 < lo < hi:
        raise ValueError(f"ladder.lite_budgets: {list(budgets)} must be a lite and a larger full budget")
    rows = []
    for m in METRICS:
        x, y = runs[f"{m}_T{lo}"], runs[f"{m}_T{hi}"]
        r, rho, note = correlations(x, y)
        rows.append({"metric": f"NoMemory {m}", "pearson_r": r, "spearman_rho": rho,
                     "n_configurations": int((np.isfinite(x) & np.isfinite(y)).sum()),
                     "lite_records": lo, "full_records": hi, "note": note})
    return pd.DataFrame(rows)
