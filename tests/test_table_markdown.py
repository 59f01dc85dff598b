"""Every table the workflow writes reads as a table a reviewer can take at its word: a title
that says what it shows, a note, integer columns printed as integers and no "-0.000" cell
(the rendering rules of `selfknow.report.tables`, which every table goes through).

The rendering rules are checked on hand-made frames; the titles and notes on the tiny run's
tables (the same code writes the default's)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfknow.report.tables import to_html, to_latex, to_markdown

#: a figure or table number the paper gives ("Table 33:", "Table I,", "Figure 4 (...)")
_LABEL = re.compile(r"^(Table|Figure)\s+[0-9IVX]+[a-z]?\s*[:,.]?\s*", re.I)
#: a negative zero at any precision, alone or inside a text cell ("-0.000 [-0.010, 0.008]")
_NEG_ZERO = re.compile(r"(?<![\w.])-0(\.0+)?(?![\w.])")


def _cells(line: str) -> list[str]:
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    return [re.sub(r"^\*\*(.*)\*\*$|^<u>(.*)</u>$", lambda m: m.group(1) or m.group(2) or "", c) for c in cells]


def parse_markdown(text: str) -> tuple[str, list[str], list[list[str]], str]:
    """(title, header, rows, note) of a table written by `to_markdown`."""
    lines = text.splitlines()
    title = lines[0][4:].strip() if lines and lines[0].startswith("### ") else ""
    rows = [i for i, line in enumerate(lines) if line.startswith("|")]
    if len(rows) < 2:
        return title, [], [], ""
    header = _cells(lines[rows[0]])
    body = [_cells(lines[i]) for i in rows[2:]]
    note = "\n".join(lines[rows[-1] + 1:]).strip()
    return title, header, body, note


def descriptive(title: str) -> bool:
    """A title that says what the table shows: after the paper's label, at least three words
    (a bare name such as "LADDER main" or "LADDER r4" is not)."""
    words = [w for w in re.split(r"[\s,:;()/]+", _LABEL.sub("", title)) if re.search(r"[A-Za-z]{2}", w)]
    return len(words) >= 3


def integer_columns(csv: pd.DataFrame) -> list[str]:
    """Columns whose every value is a whole number (the CSV keeps full precision)."""
    out = []
    for c in csv.columns:
        x = pd.to_numeric(csv[c], errors="coerce")
        if x.notna().sum() == 0 or x.notna().sum() != csv[c].notna().sum():
            continue
        v = x.dropna().to_numpy(dtype=float)
        if np.all(v == np.round(v)):
            out.append(c)
    return out


def table_problems(md_path: Path) -> list[str]:
    """What is wrong with one table's Markdown (its CSV beside it), as readable lines."""
    name = md_path.as_posix()
    title, header, body, note = parse_markdown(md_path.read_text(encoding="utf-8"))
    problems = []
    if not title:
        problems.append(f"{name}: no title")
    elif not descriptive(title):
        problems.append(f"{name}: title {title!r} does not say what the table shows")
    if not note:
        problems.append(f"{name}: no note")
    if not header:
        return problems + [f"{name}: no table"]
    for r, row in enumerate(body):
        if len(row) != len(header):
            problems.append(f"{name}: row {r + 1} has {len(row)} cells for {len(header)} columns")
            return problems
        for c, cell in zip(header, row):
            if _NEG_ZERO.search(cell):
                problems.append(f"{name}: row {r + 1}, column {c!r} reads {cell!r}")
    csv_path = md_path.with_suffix(".csv")
    if csv_path.is_file() and body:
        csv = pd.read_csv(csv_path, keep_default_na=True)
        if list(map(str, csv.columns)) == header:
            for c in integer_columns(csv):
                k = header.index(str(c))
                bad = [row[k] for row in body if "." in row[k]]
                if bad:
                    problems.append(f"{name}: integer column {c!r} printed with decimals ({bad[0]!r})")
    return problems


def table_markdowns(results: Path) -> list[Path]:
    """Every table the run wrote: a Markdown file with its CSV beside it."""
    return sorted(p for p in (results / "tables").rglob("*.md") if p.with_suffix(".csv").is_file())


# --- the rendering rules on hand-made frames -------------------------------------------------------

def test_integer_columns_print_as_integers_and_negative_zero_as_zero():
    df = pd.DataFrame({"layer": [1, 2], "auc": [0.5, -0.0001], "n": [200.0, np.nan], "mixed": ["all", -0.0004]})
    md = to_markdown(df, title="A table with counts", notes="A note.")
    _, header, body, _ = parse_markdown(md)
    assert header == ["layer", "auc", "n", "mixed"]
    # iterrows() would upcast layer to 1.000 next to the float columns
    assert body == [["1", "0.500", "200", "all"], ["2", "0.000", "", "0.000"]]
    assert "-0.000" not in to_latex(df) and "-0.000" not in to_html(df)
    assert "<td>200</td>" in to_html(df) and " 200 &" in to_latex(df)
    # booleans stay words
    assert parse_markdown(to_markdown(pd.DataFrame({"ok": [True, False]})))[2] == [["True"], ["False"]]
    # a column of fractions stays a float column though one value is whole
    assert parse_markdown(to_markdown(pd.DataFrame({"p": [1.0, 0.25]})))[2] == [["1.000"], ["0.250"]]


def test_the_checks_catch_a_bare_title_a_missing_note_and_float_counts(tmp_path):
    df = pd.DataFrame({"n_groups": [7.0, 20.0], "x": [-0.0, 0.5]})
    df.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "t.md").write_text("### LADDER main\n\n| n_groups | x |\n|---|---|\n| 7.000 | -0.000 |\n"
                                   "| 20.000 | 0.500 |\n", encoding="utf-8")
    problems = table_problems(tmp_path / "t.md")
    assert any("does not say what" in p for p in problems)
    assert any("no note" in p for p in problems)
    assert any("integer column 'n_groups'" in p for p in problems)
    assert any("reads '-0.000'" in p for p in problems)
    (tmp_path / "t.md").write_text(to_markdown(df, title="LADDER main: session CBF per estimator",
                                               notes="A note."), encoding="utf-8")
    assert table_problems(tmp_path / "t.md") == []
    assert descriptive("Table 33: T=100 vs T=300 turns per session")
    assert not descriptive("Table 33") and not descriptive("LADDER r4")


def test_the_wide_table_page_scrolls_inside_its_box():
    page = to_html(pd.DataFrame({f"column {i}": [0.5] for i in range(40)}), title="A wide table", notes="A note.")
    assert '<div class="table"><table>' in page and "</table></div>" in page
    assert re.search(r"div\.table \{[^}]*overflow-x: auto", page)


# --- every table of the tiny run ------------------------------------------------------------------

@pytest.mark.slow
def test_every_table_of_the_run_has_a_title_a_note_and_clean_numbers(tiny_run):
    tables = table_markdowns(tiny_run)
    assert len(tables) > 40, [p.as_posix() for p in tables]
    problems = [p for md in tables for p in table_problems(md)]
    assert problems == [], "\n".join(problems)
