"""Two results directories' tables, cell by cell: numbers to a tolerance, everything else
exactly. It answers "did a change move any number?" (benchmarks/compare_tables.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: where a results directory keeps its tables and any figure data
TABLE_DIRS = ("tables", "figures")


@dataclass(frozen=True)
class TableDiff:
    """One table present in both directories: what differs beyond the tolerance (empty when
    equal) and the largest absolute and relative difference over its numeric cells."""

    name: str
    problems: tuple[str, ...]
    max_abs: float
    max_rel: float

    @property
    def equal(self) -> bool:
        return not self.problems


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _row_label(df: pd.DataFrame, i: int) -> str:
    """The row's text cells, so that a reader can find it without counting rows."""
    keys = [str(df[c].iloc[i]) for c in df.columns if not _numeric(df[c])][:3]
    return f"row {i}" + (f" ({', '.join(keys)})" if keys else "")


def compare_frames(before: pd.DataFrame, after: pd.DataFrame, *, rtol: float,
                   atol: float) -> tuple[list[str], float, float]:
    """Differences beyond |a - b| <= atol + rtol * max(|a|, |b|) (NaN equals NaN), the largest
    absolute difference and the largest relative one (|a - b| / max(|a|, |b|)). Columns are
    matched by name, rows by position."""
    problems = []
    for side, cols in (("before", before.columns.difference(after.columns)),
                       ("after", after.columns.difference(before.columns))):
        if len(cols):
            problems.append(f"columns only {side}: {', '.join(map(str, cols))}")
    if len(before) != len(after):
        return problems + [f"rows: {len(before)} before, {len(after)} after"], np.nan, np.nan
    max_abs = max_rel = 0.0
    for c in (c for c in before.columns if c in after.columns):
        b, a = before[c], after[c]
        if _numeric(b) and _numeric(a):
            bv, av = b.to_numpy(float), a.to_numpy(float)
            same = (bv == av) | (np.isnan(bv) & np.isnan(av))
            with np.errstate(invalid="ignore"):
                diff = np.where(same, 0.0, np.abs(av - bv))
                scale = np.maximum(np.abs(av), np.abs(bv))
                rel = np.where(diff == 0, 0.0, diff / scale)
            bad = ~same & ~(diff <= atol + rtol * scale)
            # a NaN against a number is a problem above, not a size of difference
            max_abs = max(max_abs, np.nanmax(diff, initial=0.0))
            max_rel = max(max_rel, np.nanmax(rel, initial=0.0))
            what = "beyond the tolerance"
        else:
            # pandas' string columns keep NaN through astype(str), and NaN != NaN
            bad = ((b.astype(str) != a.astype(str)) & ~(b.isna() & a.isna())).to_numpy()
            what = "differ"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            problems.append(f"column {c}: {int(bad.sum())} cells {what}, first {_row_label(before, i)}: "
                            f"{b.tolist()[i]!r} -> {a.tolist()[i]!r}")
    return problems, float(max_abs), float(max_rel)


def _csvs(results: Path) -> set[str]:
    if not results.is_dir():
        raise FileNotFoundError(f"no results directory {results}")
    return {str(p.relative_to(results)) for d in TABLE_DIRS for p in (results / d).rglob("*.csv")}


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read table {path}: {e}") from e


def compare_results(before: Path, after: Path, *, rtol: float,
                    atol: float) -> tuple[list[TableDiff], list[str], list[str]]:
    """Every table CSV (and figure data CSV) of two results directories: the comparisons of
    those in both, and the names only in `before` and only in `after`."""
    before, after = Path(before), Path(after)
    old, new = _csvs(before), _csvs(after)
    diffs = []
    for name in sorted(old & new):
        problems, max_abs, max_rel = compare_frames(_read(before / name), _read(after / name), rtol=rtol, atol=atol)
        diffs.append(TableDiff(name, tuple(problems), max_abs, max_rel))
    return diffs, sorted(old - new), sorted(new - old)
