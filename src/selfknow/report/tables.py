"""Writing a paper table: CSV for machines, Markdown for people, LaTeX for papers.

Significance marks follow the papers: the best entry in bold, entries not significantly worse
than it underlined. Marks come as a frame of "best" / "tie" / "" aligned with the values.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from selfknow.records import write_csv, write_text


def _fmt(v, digits: int) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def to_markdown(df: pd.DataFrame, *, title: str = "", notes: str = "", digits: int = 3,
                marks: pd.DataFrame | None = None) -> str:
    cols = list(df.columns)
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(map(str, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for i, (_, row) in enumerate(df.iterrows()):
        cells = []
        for c in cols:
            s = _fmt(row[c], digits)
            m = "" if marks is None or c not in marks.columns else marks.iloc[i][c]
            cells.append(f"**{s}**" if m == "best" else f"<u>{s}</u>" if m == "tie" else s)
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


def to_latex(df: pd.DataFrame, *, title: str = "", digits: int = 3, marks: pd.DataFrame | None = None) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")

    cols = list(df.columns)
    out = [r"\begin{table}[t]", r"\centering", r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule",
           " & ".join(esc(str(c)) for c in cols) + r" \\", r"\midrule"]
    for i, (_, row) in enumerate(df.iterrows()):
        cells = []
        for c in cols:
            s = esc(_fmt(row[c], digits))
            m = "" if marks is None or c not in marks.columns else marks.iloc[i][c]
            cells.append(r"\textbf{" + s + "}" if m == "best" else r"\underline{" + s + "}" if m == "tie" else s)
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    if title:
        out.append(r"\caption{" + esc(title) + "}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


def write_table(df: pd.DataFrame, csv_path: str | Path, md_path: str | Path, *, title: str = "",
                notes: str = "", digits: int = 3, marks: pd.DataFrame | None = None) -> None:
    """Write `df` as CSV, Markdown (with marks) and LaTeX (`.tex` beside the Markdown)."""
    write_csv(df, csv_path)
    write_text(to_markdown(df, title=title, notes=notes, digits=digits, marks=marks), md_path)
    write_text(to_latex(df, title=title, digits=digits, marks=marks), Path(md_path).with_suffix(".tex"))
