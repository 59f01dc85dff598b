"""`selfknow lcae-eval`: LCAE on Stage-1 and Stage-2 records from anywhere (docs/own-results.md).

The workflow's own records, exported to the documented formats, give the workflow's numbers
exactly; malformed records stop with the file, row and column named and nothing written."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from selfknow.cli import main
from selfknow.config import load_config
from selfknow.protocols.lcae.evaluate import TABLES, fit_stage1, stage3
from selfknow.protocols.lcae.records import stage1_records, stage2_records
from selfknow.records import write_record_table


def lcae_eval_args(tiny_run, tmp_path, out) -> list[str]:
    """`selfknow lcae-eval` on the tiny run's own records, exported to the documented formats
    (Stage 1 CSV, Stage 2 JSONL, the prices), with its config's settings, writing to `out`."""
    stage1 = pd.concat([stage1_records(pd.read_parquet(p)) for p in sorted((tiny_run / "lcae" / "stage1").glob("*/*.parquet"))])
    stage2 = pd.concat([stage2_records(pd.read_parquet(p)) for p in sorted((tiny_run / "lcae" / "stage2").glob("*/*.parquet"))])
    stage1.to_csv(tmp_path / "stage1.csv", index=False)
    write_record_table(stage2, tmp_path / "stage2.jsonl")
    lc = load_config(REPO / "config" / "test.yaml")["lcae"]
    pd.DataFrame([(m, *p) for m, p in lc["prices"].items()], columns=["model", "price_in", "price_out"]).to_csv(
        tmp_path / "prices.csv", index=False)
    return ["lcae-eval", str(tmp_path / "stage1.csv"), str(tmp_path / "stage2.jsonl"), str(out), "--quiet",
            "--method", lc["rasch_method"], "--eps", repr(lc["lcae_eps"]), "--prices", str(tmp_path / "prices.csv")]


def test_workflow_records_give_the_workflows_lcae_numbers(tiny_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(lcae_eval_args(tiny_run, tmp_path, out)) == 0
    assert f"45 examinees x 20 items; Stage 3 of 9 examinees -> {out}" in capsys.readouterr().out
    for ours, theirs, key in (("irt/persons", "irt/persons", ["examinee"]), ("irt/items", "irt/items", ["item_id"]),
                              ("stage3", "stage3", ["examinee", "condition", "repeat"])):
        a = pd.read_parquet(out / f"{ours}.parquet").sort_values(key).reset_index(drop=True)
        b = pd.read_parquet(tiny_run / "lcae" / f"{theirs}.parquet").sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    for t in TABLES:  # every cell of Tables I-III and item fit, byte for byte
        assert (out / "tables" / f"{t}.csv").read_bytes() == (tiny_run / "tables" / "lcae" / f"{t}.csv").read_bytes()
    # the tests' note as the workflow's (Friedman, pairwise Wilcoxon-Holm)
    notes = lambda p: [ln for ln in p.read_text().splitlines() if ln.startswith(("Friedman", "Pairwise"))]
    assert notes(out / "tables" / "table1.md") == notes(tiny_run / "tables" / "lcae" / "table1.md") != []
    # Figure 2: one point per Standard-prompting examinee (model x checkpoint), CE from the prices
    points = pd.read_csv(out / "figure2_points.csv")
    assert len(points) == 9 and (out / "figure2.png").stat().st_size > 0
    assert points.loc[points["group"] == "smollm2", "ce"].item() == pytest.approx(8.733624e6, rel=1e-6)


def _records(tmp_path, n_examinees=6, n_items=12, seed=0):
    """Synthetic Stage-1 (two repeats) and Stage-2 records from a Rasch model."""
    rng = np.random.default_rng(seed)
    theta, b = rng.normal(0, 1, n_examinees), np.linspace(-1.5, 1.5, n_items)
    p = 1 / (1 + np.exp(b[None] - theta[:, None]))
    s1 = pd.DataFrame([dict(examinee=f"e{i}", item=f"q{k}", repeat=r, correct=int(rng.random() < p[i, k]))
                       for i in range(n_examinees) for k in range(n_items) for r in range(2)])
    s2 = pd.DataFrame([dict(examinee=f"e{i}", item=f"q{k}", condition=c, repeat=r, error_p=float(rng.random()))
                       for i in range(n_examinees) for c in ("baseline", "ids", "dpr", "ids_dpr")
                       for r in range(2) for k in range(n_items)])
    return s1, s2


def test_lcae_eval_of_synthetic_records_and_its_options(tmp_path):
    s1, s2 = _records(tmp_path)
    s1.to_parquet(tmp_path / "s1.parquet", index=False)
    s2.rename(columns={"error_p": "confidence"}).assign(confidence=lambda d: 1 - d["confidence"]).to_csv(
        tmp_path / "s2c.csv", index=False)
    s2.to_csv(tmp_path / "s2.csv", index=False)
    pd.DataFrame({"model": [f"e{i}" for i in range(6)], "price_in": 0.039, "price_out": 0.19}).to_csv(
        tmp_path / "prices.csv", index=False)
    for name, s2_file, extra in (("a", "s2.csv", ["--prices", str(tmp_path / "prices.csv")]), ("c", "s2c.csv", []),
                                 ("m", "s2.csv", ["--repeats", "majority"])):
        assert main(["lcae-eval", str(tmp_path / "s1.parquet"), str(tmp_path / s2_file), str(tmp_path / name),
                     "--quiet", *extra]) == 0
    a = pd.read_parquet(tmp_path / "a" / "stage3.parquet")
    assert len(a) == 6 * 4 * 2 and (a["n_items"] == 12).all()
    # confidence = 1 - error_p states the same thing
    c = pd.read_parquet(tmp_path / "c" / "stage3.parquet")
    np.testing.assert_allclose(c["lcae"], a["lcae"], rtol=1e-12)
    # without correct_final, the final answers are the Stage-1 responses (repeat 0): same ability
    first = s1[s1["repeat"] == 0].pivot(index="examinee", columns="item", values="correct")
    assert (a.groupby("examinee")["accuracy"].first() == first.mean(axis=1)).all()
    # majority of the two repeats: a tie keeps repeat 0's response, so only 1+1 -> 1 and 0+0 -> 0
    maj = pd.read_parquet(tmp_path / "m" / "irt" / "persons.parquet").set_index("examinee")
    both = s1.groupby(["examinee", "item"])["correct"].agg(["sum", "first"])
    expect = np.where(both["sum"] == 2, 1, np.where(both["sum"] == 0, 0, both["first"]))
    assert (maj["raw_score"] == pd.Series(expect, index=both.index).groupby("examinee").sum()).all()
    # cost efficiency at $0.039 in, $0.19 out: the paper's 8.73M tokens per USD
    points = pd.read_csv(tmp_path / "a" / "figure2_points.csv")
    assert len(points) == 6 and np.allclose(points["ce"], 1e6 / ((0.039 + 0.19) / 2))
    assert (tmp_path / "a" / "figure2.png").stat().st_size > 0


def test_stage3_equals_a_hand_computed_lcae():
    """One examinee, two items, one assessment each: LCAE by the SPEC §3 formula by hand."""
    persons = pd.DataFrame({"examinee": ["e"], "model": ["e"], "checkpoint": [""], "theta": [0.5]})
    items = pd.DataFrame({"item_id": ["q1", "q2"], "b": [-1.0, 1.0], "extreme": ["", ""]})
    s2 = pd.DataFrame({"examinee": "e", "item": ["q1", "q2"], "condition": "baseline", "repeat": 0,
                       "error_p": [0.2, np.nan], "correct_final": [True, False], "route": "fast",
                       "truncated": [False, True], "tokens_in": 3, "tokens_out": 4})
    row = stage3(s2, persons, items, eps=1e-6).iloc[0]
    e = 1 - 1 / (1 + np.exp(-(0.5 + 1.0)))  # IRT_ModelErrorP of q1; q2's assessment was truncated
    assert row["lcae"] == pytest.approx(-(e * np.log(0.2) + (1 - e) * np.log(0.8)), rel=1e-12)
    assert row["lcae_squared"] == pytest.approx((e - 0.2) ** 2, rel=1e-12)
    assert (row["n_items"], row["n_unparsed"], row["n_truncated"], row["tokens_in"]) == (2, 0, 1, 6)


BAD = [
    # (which file, how it is spoiled, the message)
    ("s1", lambda s1, s2: s1.drop(columns="correct"), r"s1\.csv: missing column\(s\) \['correct'\]"),
    ("s1", lambda s1, s2: s1.assign(correct=s1["correct"].astype(object).where(s1.index != 4, "yes")),
     r"s1\.csv: line 6, column 'correct': expected 0/1 or true/false, got 'yes'"),
    ("s1", lambda s1, s2: s1.assign(examinee=s1["examinee"].where(s1.index != 2, "")),
     r"s1\.csv: line 4, column 'examinee': missing or empty"),
    ("s1", lambda s1, s2: pd.concat([s1, s1.iloc[[3]]]),
     r"s1\.csv: line 146: a second record of \(examinee='e0', item='q1', repeat=1\)"),
    ("s2", lambda s1, s2: s2.drop(columns="error_p"), r"s2\.csv: needs exactly one of the columns 'error_p'"),
    ("s2", lambda s1, s2: s2.assign(error_p=s2["error_p"].astype(object).where(s2.index != 0, "high")),
     r"s2\.csv: line 2, column 'error_p': expected a number, got 'high'"),
    ("s2", lambda s1, s2: s2.assign(error_p=s2["error_p"].where(s2.index != 7, 1.5)),
     r"s2\.csv: line 9, column 'error_p': 1\.5 is not a probability in \[0, 1\]"),
    ("s2", lambda s1, s2: s2.assign(examinee=s2["examinee"].where(s2.index != 10, "ghost")),
     r"s2\.csv: line 12, column 'examinee': 'ghost': this examinee has no Stage-1 responses"),
    ("s2", lambda s1, s2: s2.assign(item=s2["item"].where(s2.index != 11, "q99")),
     r"s2\.csv: line 13, column 'item': 'q99': this item has no Stage-1 responses"),
    ("s2", lambda s1, s2: s2.assign(condition=s2["condition"].where(s2.index != 5, "cot")),
     r"s2\.csv: line 7, column 'condition': 'cot' is not one of baseline, ids, dpr, ids_dpr"),
    ("s2", lambda s1, s2: s2.assign(repeat=s2["repeat"].astype(float).where(s2.index != 3, 0.5)),
     r"s2\.csv: line 5, column 'repeat': expected an integer, got '0\.5'"),
]


@pytest.mark.parametrize("which,spoil,message", BAD, ids=[re.sub(r"\W+", "_", m[2])[-40:] for m in BAD])
def test_malformed_records_name_file_row_and_column_and_write_nothing(tmp_path, capsys, which, spoil, message):
    s1, s2 = _records(tmp_path)
    s1, s2 = (spoil(s1, s2), s2) if which == "s1" else (s1, spoil(s1, s2))
    s1.to_csv(tmp_path / "s1.csv", index=False)
    s2.to_csv(tmp_path / "s2.csv", index=False)
    assert main(["lcae-eval", str(tmp_path / "s1.csv"), str(tmp_path / "s2.csv"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_jsonl_and_parquet_name_their_line_and_row(tmp_path, capsys):
    s1, s2 = _records(tmp_path)
    s1.to_csv(tmp_path / "s1.csv", index=False)
    lines = [json.dumps(r) for r in s2.to_dict("records")]
    lines[2] = lines[2].replace('"error_p": ', '"error_p": -')
    (tmp_path / "s2.jsonl").write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
    assert main(["lcae-eval", str(tmp_path / "s1.csv"), str(tmp_path / "s2.jsonl"), str(tmp_path / "o")]) == 2
    assert re.search(r"s2\.jsonl: line 4, column 'error_p': -0\.\d+ is not a probability", capsys.readouterr().err)
    (tmp_path / "s2.jsonl").write_text(lines[0] + "\n{not json\n")
    assert main(["lcae-eval", str(tmp_path / "s1.csv"), str(tmp_path / "s2.jsonl"), str(tmp_path / "o")]) == 2
    assert "s2.jsonl: line 2: invalid JSON" in capsys.readouterr().err
    s2.assign(error_p=s2["error_p"].where(s2.index != 20, 2.0)).to_parquet(tmp_path / "s2.parquet", index=False)
    assert main(["lcae-eval", str(tmp_path / "s1.csv"), str(tmp_path / "s2.parquet"), str(tmp_path / "o")]) == 2
    assert "s2.parquet: row 21, column 'error_p': 2.0 is not a probability in [0, 1]" in capsys.readouterr().err
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "s2.parquet").write_text("not parquet")
    for bad, message in (("empty.csv", "empty.csv: cannot read as csv"), ("s2.parquet", "s2.parquet: ")):
        assert main(["lcae-eval", str(tmp_path / "s1.csv"), str(tmp_path / bad), str(tmp_path / "o")]) == 2
        assert f"error: {tmp_path / message}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_fit_stage1_first_rule_takes_the_lowest_repeat_whatever_the_row_order():
    rows = [("a", "q1", 1, True), ("a", "q1", 0, False), ("a", "q2", 0, True), ("a", "q3", 0, False),
            ("b", "q1", 0, True), ("b", "q2", 1, True), ("b", "q2", 0, False), ("b", "q3", 0, True),
            ("c", "q1", 0, False), ("c", "q2", 0, True), ("c", "q3", 0, False)]
    s1 = pd.DataFrame(rows, columns=["examinee", "item", "repeat", "correct"]).assign(
        status="parsed", model=lambda d: d["examinee"], checkpoint="", strategy="")
    persons, items, converged = fit_stage1(s1, method="jml")
    assert converged and persons.set_index("examinee")["raw_score"].to_dict() == {"a": 1.0, "b": 2.0, "c": 1.0}
    assert items["p_correct"].tolist() == pytest.approx([1 / 3, 2 / 3, 1 / 3])
