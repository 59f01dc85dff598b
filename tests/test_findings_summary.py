"""The README's summary of what a run finds (`selfknow findings-summary`): every row of each
paper's findings table, grouped by verdict, none chosen or left out."""
from __future__ import annotations

import pandas as pd

from selfknow.cli import main
from selfknow.report.findings import AGREES, DISAGREES, UNDECIDED, COLUMNS, Claim, frame, row


def _table(rows) -> pd.DataFrame:
    return frame([row(name, diff, lo, hi, Claim(direction, "quote")) for name, diff, lo, hi, direction in rows])


def _write(results, paper, table) -> None:
    out = results / "tables" / paper
    out.mkdir(parents=True)
    table.to_csv(out / "findings.csv", index=False)


def test_every_row_appears_once_under_its_verdict_in_the_papers_order(tmp_path, capsys):
    persistent = _table([("Oracle − SC", -0.066, -0.119, -0.011, 1), ("Oracle − chance", 0.21, 0.17, 0.25, 1),
                         ("Multi − single", -0.0002, -0.02, 0.03, 1)])
    lcae = _table([("IDS − Baseline", 0.041, 0.012, 0.070, -1)])
    assert list(persistent["verdict"]) == [DISAGREES, AGREES, UNDECIDED]
    _write(tmp_path, "lcae", lcae)
    _write(tmp_path, "persistent", persistent)

    assert main(["findings-summary", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        "- **Persistent calibration** (`results/tables/persistent/findings.md`): 3 comparisons; 1 disagree, "
        "1 agree, 1 undecided.\n"
        "  - Disagree: Oracle − SC -0.066 [-0.119, -0.011].\n"
        "  - Agree: Oracle − chance 0.210 [+0.170, +0.250].\n"
        "  - Undecided: Multi − single 0.000 [-0.020, +0.030].\n"
        "- **LCAE** (`results/tables/lcae/findings.md`): 1 comparison; 1 disagree.\n"
        "  - Disagree: IDS − Baseline 0.041 [+0.012, +0.070].\n")


def test_a_verdict_the_summary_does_not_know_is_an_error_naming_the_paper(tmp_path, capsys):
    table = _table([("A − B", 0.1, 0.05, 0.15, 1)]).assign(verdict="maybe")
    assert list(table.columns) == list(COLUMNS)
    _write(tmp_path, "ladder", table)
    assert main(["findings-summary", str(tmp_path)]) == 2
    assert "ladder findings: unknown verdicts ['maybe']" in capsys.readouterr().err


def test_a_results_directory_without_findings_tables_is_refused(tmp_path, capsys):
    assert main(["findings-summary", str(tmp_path)]) == 2
    assert "no tables/<paper>/findings.csv" in capsys.readouterr().err
