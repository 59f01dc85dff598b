"""The self-knowledge card joins the three protocols' outputs per model."""
import numpy as np
import pandas as pd

from selfknow.report.card import knowledge_card, ladder_columns, lcae_columns, persistent_columns


def test_card_rows_and_intervals():
    persons = pd.DataFrame({"model": ["a", "a", "b"], "checkpoint": ["c2", "c2", "final"],
                            "strategy": ["standard", "cot", "standard"], "theta": [1.0, 0.5, -0.2],
                            "se": [0.5, 0.4, 0.1]})
    stage3 = pd.DataFrame({"model": ["a"] * 3 + ["b"] * 3, "checkpoint": ["c2"] * 3 + ["final"] * 3,
                           "condition": "baseline", "lcae": [1.0, 2.0, 3.0, 0.5, 0.5, 0.5]})
    lc = lcae_columns(persons, stage3, {"a": "c2", "b": "final"})
    assert lc.set_index("model").loc["a", "ability θ"] == "1.000 [0.020, 1.980]"
    # mean 2, t(0.975, 2) = 4.303, s = 1, n = 3 -> half-width 2.484
    assert lc.set_index("model").loc["a", "LCAE baseline"] == "2.000 [-0.484, 4.484]"
    main = pd.DataFrame({"model": ["a", "a"], "estimator": ["NoMemory", "OraclePDC"], "CBF": [0.7, 1.0],
                         "CI_low": [0.65, 1.0], "CI_high": [0.75, 1.0]})
    ld = ladder_columns(main)
    assert ld.loc[0, "CBF L0 NoMemory"] == "0.700 [0.650, 0.750]"
    assert ld.loc[0, "CBF L3 OraclePDC"] == "1.000 (by construction)"  # a point, and fixed: no interval
    pts = pd.DataFrame({"normaliser": "eq1", "method": "sc", "metric": ["contrast_auc", "full_ece"],
                        "value": [0.6, 0.1]})
    reps = {"eq1|sc|contrast_auc": np.linspace(0.5, 0.7, 101)}
    pc = persistent_columns({"a": (pts, reps)})
    assert pc.loc[0, "contrast AUC (SC)"] == "0.600 [0.505, 0.695]"
    assert pc.loc[0, "full-set ECE (SC)"] == "0.100"
    card = knowledge_card(["a", "b", "c"], {"LCAE": lc, "LADDER": ld, "persistent": pc})
    assert list(card["model"]) == ["a", "b", "c"]  # a row for every model of the registry
    assert card.set_index("model").loc["b", "ability θ"] == "-0.200 [-0.396, -0.004]"
    assert card.set_index("model").loc["b", "CBF L0 NoMemory"] == ""  # b is not in LADDER
    # an empty cell, or an empty row, says which protocols do not run the model
    assert card.set_index("model")["not run"].to_dict() == {"a": "-", "b": "LADDER, persistent",
                                                          "c": "LCAE, LADDER, persistent"}
    # no "-0.000", and an interval that prints as a single point is not printed as one
    assert lcae_columns(persons.assign(theta=[1.0, 0.5, -0.0001], se=[0.5, 0.4, 0.0001]), stage3,
                        {"b": "final"}).loc[0, "ability θ"] == "0.000"
    # b's three repeats agree: its LCAE has no interval
    assert lc.set_index("model").loc["b", "LCAE baseline"] == "0.500"


def test_prompted_card_cells_name_the_model_that_stated_them():
    main = pd.DataFrame({"model": ["wm", "wm", "chat"], "estimator": ["NoMemory", "ZS", "ZS"], "CBF": [0.7, 0.45, 0.6],
                         "CI_low": [0.65, 0.40, 0.55], "CI_high": [0.75, 0.50, 0.65]})
    ld = ladder_columns(main, {"wm": "smollm2", "chat": "chat"}).set_index("model")
    assert ld.loc["wm", "CBF L1 ZS"] == "0.450 [0.400, 0.500] (stated by smollm2)"
    assert ld.loc["chat", "CBF L1 ZS"] == "0.600 [0.550, 0.650] (stated by chat)"
    assert ld.loc["wm", "CBF L0 NoMemory"] == "0.700 [0.650, 0.750]"  # not prompted: nobody states it


def test_the_card_job_writes_its_catalog_entry_with_the_entrys_notes(tmp_path):
    """`card_table` is the card entry's builder: the job writes the card through the one driver
    with the entry's title and notes, and reports its size; a protocol the config does not run
    (a path None) is named in `not run`."""
    from selfknow.report.catalog import CARD_CATALOG
    from selfknow.report.jobs import write_catalog

    pd.DataFrame({"model": ["a"], "checkpoint": ["c2"], "strategy": ["standard"], "theta": [1.0],
                  "se": [0.5]}).to_parquet(tmp_path / "persons.parquet")
    pd.DataFrame({"model": "a", "checkpoint": "c2", "condition": "baseline",
                  "lcae": [1.0, 2.0, 3.0]}).to_parquet(tmp_path / "stage3.parquet")
    known = {"models": ["a", "b"], "last_ckpt": {"a": "c2", "b": "final"},
             "lcae_persons": str(tmp_path / "persons.parquet"), "lcae_stage3": str(tmp_path / "stage3.parquet"),
             "ladder_main": None, "persistent": {}, "stated_by": None}
    outputs = {f"self_knowledge_{e}": str(tmp_path / f"card.{e}") for e in ("csv", "md")}
    assert write_catalog(CARD_CATALOG, known, outputs, None) == {"models": 2, "columns": 3}
    card = pd.read_csv(tmp_path / "card.csv", keep_default_na=False)
    assert card.to_dict("records") == [
        {"model": "a", "ability θ": "1.000 [0.020, 1.980]", "LCAE baseline": "2.000 [-0.484, 4.484]", "not run": "-"},
        {"model": "b", "ability θ": "", "LCAE baseline": "", "not run": "LCAE"}]
    entry, = CARD_CATALOG.tables
    md = (tmp_path / "card.md").read_text()
    assert md.startswith(f"### {entry.title}\n") and md.endswith(f"\n\n{entry.notes}\n")
