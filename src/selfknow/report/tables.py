"""Writing a paper table: CSV for machines, Markdown for people, LaTeX for papers, and a
self-contained HTML page for the Snakemake report (which shows HTML inline but offers CSV and
Markdown only as downloads).

Significance marks follow the papers: the best entry in bold, entries not significantly worse
than it underlined, an entry tied with the best both. Marks come as a frame of "best" / "tie" /
"best+tie" / "" aligned with the values (`stats.persistent.significance`).
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.records import write_csv, write_text
from selfknow.stats.persistent.significance import BOLD, UNDERLINED


#: Decimals of floats in the rendered tables (Markdown, LaTeX, HTML; the CSV keeps full
#: precision) when a writer is not given `digits`. A table job sets it from the config's
#: rendering-only `report.decimals` (`set_decimals`), so changing it reruns only the table jobs.
DECIMALS = 3


#: Which best a table bolds (`report.bold`, rendering only): "separated", a best its interval
#: separates from the next and that is not fixed by construction
#: (`stats.persistent.significance.separated_bold`); "paper", the best by point value as the
#: authors' tables do (§A.8). A table job sets it (`table_job_provenance`).
BOLD_RULE = "separated"


def bold_text() -> str:
    """What bold means in a table under `BOLD_RULE`, as its note says it."""
    if BOLD_RULE == "paper":
        return "Bold: best in its block"
    return ("Bold: a best that its paired bootstrap interval separates from every other row of its block, that "
            "is not fixed by construction and whose own 95 % interval excludes chance (0 for a Δ, 0.5 for an AUC; "
            "a block where nothing is separated has no bold)")


def set_bold_rule(rule: str) -> None:
    """The bold rule of every table this process writes from now on."""
    global BOLD_RULE
    if rule not in ("separated", "paper"):
        raise ValueError(f"report.bold must be 'separated' or 'paper', got {rule!r}")
    BOLD_RULE = rule


def value_interval(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """"value [lo, hi]"; the value alone where the interval is missing or a single point
    (identical repeats give no interval), "" for a missing value."""
    if value is None or not np.isfinite(value):
        return ""
    if not (np.isfinite(lo) and np.isfinite(hi)) or format_number(lo, digits) == format_number(hi, digits):
        return format_number(value, digits)
    return f"{format_number(value, digits)} [{format_number(lo, digits)}, {format_number(hi, digits)}]"


def set_decimals(n: int) -> None:
    """The default decimals of every table this process writes from now on."""
    global DECIMALS
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"report.decimals must be a non-negative integer, got {n!r}")
    DECIMALS = n


def format_number(v: float, digits: int | None = None) -> str:
    """A float at `digits` decimals (default `DECIMALS`); a value that rounds to zero prints
    without a sign. Text cells that hold numbers ("0.512 [0.480, 0.544]") use it too."""
    digits = DECIMALS if digits is None else digits
    s = f"{v:.{digits}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s


def _fmt(v, digits: int | None) -> str:
    digits = DECIMALS if digits is None else digits
    if isinstance(v, (float, np.floating)):
        return "" if math.isnan(v) else format_number(float(v), digits)
    if isinstance(v, (np.integer, np.bool_)):
        return str(v.item())
    return str(v)


def _is_integer_column(col: pd.Series) -> bool:
    """An integer column, or a float one whose values are all whole numbers (a count that
    became float through a NaN, a merge or a pivot): printed without decimals."""
    if pd.api.types.is_bool_dtype(col):
        return False
    if pd.api.types.is_integer_dtype(col):
        return True
    if not pd.api.types.is_float_dtype(col):
        return False
    x = col.to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    return x.size > 0 and bool(np.all(x == np.round(x))) and bool(np.all(np.abs(x) < 2**53))


def formatted(df: pd.DataFrame, digits: int | None = None) -> list[list[str]]:
    """The table's cells as text, row by row, by the rendering rules every format shares:
    integer columns without decimals, floats at `digits` decimals (default `DECIMALS`), no
    "-0.000", NaN as an empty cell. Cells are read per column, so an integer column keeps its
    type next to float ones (a row of a mixed frame would be upcast to float)."""
    cols = []
    for c in range(df.shape[1]):
        col = df.iloc[:, c]
        if _is_integer_column(col):
            cols.append(["" if pd.isna(v) else str(int(v)) for v in col])
        else:
            cols.append([_fmt(v, digits) for v in col])
    return [list(r) for r in zip(*cols)] if cols else [[] for _ in range(len(df))]


def to_markdown(df: pd.DataFrame, *, title: str = "", notes: str = "", digits: int | None = None,
                marks: pd.DataFrame | None = None) -> str:
    cols = list(df.columns)
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(map(str, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for i, row in enumerate(formatted(df, digits)):
        cells = []
        for c, s in zip(cols, row):
            m = "" if marks is None or c not in marks.columns else marks.iloc[i][c]
            s = f"**{s}**" if m in BOLD else s
            cells.append(f"<u>{s}</u>" if m in UNDERLINED else s)
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


def to_latex(df: pd.DataFrame, *, title: str = "", digits: int | None = None, marks: pd.DataFrame | None = None) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")

    cols = list(df.columns)
    out = [r"\begin{table}[t]", r"\centering", r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule",
           " & ".join(esc(str(c)) for c in cols) + r" \\", r"\midrule"]
    for i, row in enumerate(formatted(df, digits)):
        cells = []
        for c, s in zip(cols, row):
            s = esc(s)
            m = "" if marks is None or c not in marks.columns else marks.iloc[i][c]
            s = r"\textbf{" + s + "}" if m in BOLD else s
            cells.append(r"\underline{" + s + "}" if m in UNDERLINED else s)
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    if title:
        out.append(r"\caption{" + esc(title) + "}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


_HTML_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; color: #1a1a1a;
       background: #ffffff; margin: 1.2em; }
h3 { font-size: 16px; margin: 0 0 0.6em 0; }
div.table { overflow-x: auto; max-width: 100%; margin-bottom: 0.8em; }
table { border-collapse: collapse; }
th, td { padding: 3px 10px; border-bottom: 1px solid #d0d0d0; text-align: right; white-space: nowrap; }
th { border-bottom: 2px solid #404040; background: #f2f2f2; }
td.text, th.text { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
p.notes { max-width: 60em; }
div.provenance { color: #555555; font-size: 12px; border-top: 1px solid #d0d0d0; padding-top: 0.4em; }
div.provenance p { margin: 0.1em 0; font-family: ui-monospace, monospace; }
"""


def to_html(df: pd.DataFrame, *, title: str = "", notes: str = "", digits: int | None = None,
            marks: pd.DataFrame | None = None, provenance: dict | None = None) -> str:
    """A standalone HTML page: the table (best in bold, not-significantly-worse underlined),
    the notes, and the provenance summary in a footer."""
    cols = list(df.columns)
    text_cols = {c for c in cols if not pd.api.types.is_numeric_dtype(df[c])}

    def cls(c) -> str:
        return ' class="text"' if c in text_cols else ""

    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title or 'table')}</title><style>{_HTML_STYLE}</style></head><body>"]
    if title:
        out.append(f"<h3>{html.escape(title)}</h3>")
    # a table wider than the page scrolls inside its box instead of being cut off at the right
    out.append('<div class="table"><table><thead><tr>' + "".join(f"<th{cls(c)}>{html.escape(str(c))}</th>" for c in cols)
               + "</tr></thead><tbody>")
    for i, row in enumerate(formatted(df, digits)):
        cells = []
        for c, s in zip(cols, row):
            s = html.escape(s)
            m = "" if marks is None or c not in marks.columns else marks.iloc[i][c]
            s = f"<strong>{s}</strong>" if m in BOLD else s
            s = f"<u>{s}</u>" if m in UNDERLINED else s
            cells.append(f"<td{cls(c)}>{s}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    for para in (p.strip() for p in notes.split("\n\n")):
        if para:
            out.append(f'<p class="notes">{html.escape(para)}</p>')
    if marks is not None:
        out.append(f'<p class="notes">{html.escape(bold_text())}; underlined: not significantly worse than the best '
                   '(both: tied with the best).</p>')
    if provenance:
        from selfknow.report.provenance import summary_lines

        out.append('<div class="provenance"><p>Provenance</p>'
                   + "".join(f"<p>{html.escape(line)}</p>" for line in summary_lines(provenance)) + "</div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_table(df: pd.DataFrame, csv_path: str | Path, md_path: str | Path, *, title: str = "",
                notes: str = "", digits: int | None = None, marks: pd.DataFrame | None = None,
                provenance: dict | None = None) -> None:
    """Write `df` as CSV, Markdown (with marks), LaTeX (`.tex` beside the Markdown) and HTML
    (`.html` beside the Markdown, for the report); with `provenance`, also its sidecar
    `<csv stem>.json` (see `selfknow.report.provenance`) and a provenance footer in the HTML."""
    if marks is not None and marks.shape[0] != df.shape[0]:
        raise ValueError(f"{csv_path}: marks must align with the table's {df.shape[0]} rows, "
                         f"got {marks.shape[0]}")
    write_csv(df, csv_path)
    write_text(to_markdown(df, title=title, notes=notes, digits=digits, marks=marks), md_path)
    write_text(to_latex(df, title=title, digits=digits, marks=marks), Path(md_path).with_suffix(".tex"))
    write_text(to_html(df, title=title, notes=notes, digits=digits, marks=marks, provenance=provenance),
               Path(md_path).with_suffix(".html"))
    if provenance is not None:
        from selfknow.report.provenance import write_sidecar

        write_sidecar(provenance, csv_path)


@dataclass(frozen=True)
class Built:
    """What every catalog builder returns (`write_entries`): its `table` (a figure's data), the
    `notes` drawn from its numbers, each a paragraph after the entry's own notes, its
    significance `marks` (aligned with the table's rows), its `digits` where they are not the
    config's, and `summary`, what its job reports of it (`selfknow.runlog`)."""

    table: pd.DataFrame
    notes: tuple[str, ...] = ()
    marks: pd.DataFrame | None = None
    digits: int | None = None
    summary: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.notes, str):
            raise TypeError("Built.notes is a tuple of paragraphs, not one string")


def entry_notes(notes: str, derived: Sequence[str] = ()) -> str:
    """The notes of a catalog entry's table: the entry's `notes`, then each paragraph its
    builder drew from its numbers, as paragraphs; empty ones are left out."""
    return "\n\n".join(p for p in (notes, *derived) if p)


def write_entries(entries: Sequence, known: dict, outputs: Mapping[str, str], *,
                  provenance: dict | None = None) -> dict[str, Built]:
    """The one driver of every table and figure job: build each catalog entry of `entries`
    (`selfknow.report.catalog.Table`) and write it. A builder takes what it names of `known`
    (`selfknow.report.catalog.call_by_name`), a figure's also `png` (`outputs[name]`), its
    `title` and `provenance`, and returns a `Built`. Its table is written to
    `outputs["<name>_csv"]` / `outputs["<name>_md"]` (a figure's data table where the entry has
    one) with the entry's title (formatted with `known`), its notes (`entry_notes`) and the job's
    `provenance`; each table then joins `known` under its name (a name `known` has keeps its
    value), for a later builder to take. Returns what each entry built, by name."""
    from selfknow.report.catalog import call_by_name

    out = {}
    for t in entries:
        title = t.title.format_map(known) if "{" in t.title else t.title
        extra = {"png": outputs[t.name], "title": title, "provenance": provenance} if t.figure else {}
        built = out[t.name] = call_by_name(t.build(), {**known, **extra})
        if not isinstance(built, Built):
            raise TypeError(f"{t.builder} (catalog entry {t.name!r}) returned {type(built).__name__}, not Built")
        known.setdefault(t.name, built.table)
        if t.writes_table:
            write_table(built.table, outputs[f"{t.name}_csv"], outputs[f"{t.name}_md"], title=title,
                        notes=entry_notes(t.notes, built.notes), digits=built.digits, marks=built.marks,
                        provenance=provenance)
    return out


def table_job_provenance(config: Mapping, input_files: Sequence[str], report: Mapping, **what) -> dict:
    """For a job that writes tables: set their rendering (config `report`; rendering only) and
    return the provenance of its outputs (`selfknow.report.provenance.job_provenance` of
    `input_files` with `what`: sections, models, datasets)."""
    from selfknow.report.provenance import job_provenance

    set_decimals(report["decimals"])
    set_bold_rule(report["bold"])
    return job_provenance(config, input_files, **what)
