"""The world evolution table against the generator's curriculum record (hand-computed cases)."""
import pandas as pd
import pytest

from selfknow.world.evolution import evolution_table

CKS = ["phase1", "phase2", "phase3", "phase4"]


def _judged(rows: dict[str, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"checkpoint": c, "item_id": item, "domain": "d", "correct": bool(v)}
                         for item, vals in rows.items() for c, v in zip(CKS, vals)])


def test_contrast_sets_are_set_against_the_curriculum_between_the_two_checkpoints():
    judged = _judged({
        "a": [0, 0, 1, 1],   # introduced in phase 2 (0-based): seen first by phase3
        "b": [0, 1, 1, 0],   # made rare in phase 3: forgotten by phase4
        "c": [0, 0, 0, 1],   # improves with no curriculum event (learning dynamics)
        "d": [1, 1, 0, 1],   # rewritten in phase 2, relearned by phase4
        "e": [1, 1, 1, 1],   # introduced in phase 3 but already right: not in any contrast set
    })
    curriculum = pd.DataFrame({"item_id": list("abcde"), "intro_phase": [2, 0, 0, 0, 3],
                               "rewrite_phase": [-1, -1, -1, 2, -1], "rare_phase": [-1, 3, -1, -1, -1]})
    t = evolution_table(judged, CKS, 1, curriculum).set_index(["earlier", "later"])
    # phase2 -> phase3 (positions 1 -> 2: events in 0-based phase 2): a improves (introduced), d regresses
    # (rewritten: the reference is the new value)
    r = t.loc[("phase2", "phase3")]
    assert (r.improvements, r.regressions, r.new_between, r.improvements_new) == (1, 1, 2, 1)
    assert (r.rare_between, r.regressions_rare) == (0, 0)
    # phase2 -> phase4: a (new) and c improve, d is right at both, e is new but right at both; b regresses
    # (rare in phase 3)
    r = t.loc[("phase2", "phase4")]
    assert (r.improvements, r.regressions, r.new_between, r.improvements_new) == (2, 1, 3, 1)
    assert (r.rare_between, r.regressions_rare) == (1, 1)
    # phase3 -> phase4: c and d improve (d's rewrite came before phase3: not new), b regresses (rare)
    r = t.loc[("phase3", "phase4")]
    assert (r.improvements, r.improvements_new, r.new_between, r.regressions, r.regressions_rare) == (2, 0, 1, 1, 1)


def test_an_item_missing_from_the_curriculum_record_is_named():
    judged = _judged({"a": [0, 0, 1, 1], "zz": [0, 1, 1, 1]})
    curriculum = pd.DataFrame({"item_id": ["a"], "intro_phase": [0], "rewrite_phase": [-1], "rare_phase": [-1]})
    with pytest.raises(ValueError, match="'zz'"):
        evolution_table(judged, CKS, 1, curriculum)


def test_the_evolution_job_writes_its_catalog_entry_with_a_paragraph_per_family(tmp_path):
    """The world's job writes the table through its catalog entry: one paragraph per family
    (exact match per checkpoint), then the curriculum's; its log reports the pairs and the
    smallest contrast set."""
    from selfknow.report.catalog import WORLD_CATALOG
    from selfknow.report.jobs import write_catalog
    from selfknow.world.evolution import CURRICULUM_NOTE

    judged = _judged({"a": [0, 0, 1, 1], "b": [0, 1, 1, 0], "c": [1, 1, 1, 1]})
    paths = {}
    for c, g in judged.groupby("checkpoint"):
        paths[f"wm@{c}"] = str(tmp_path / f"{c}.parquet")
        g.to_parquet(paths[f"wm@{c}"])
    pd.DataFrame({"item_id": list("abc"), "intro_phase": [2, 0, 0], "rewrite_phase": -1,
                  "rare_phase": [-1, 3, -1]}).to_parquet(tmp_path / "qa.parquet")
    known = {"generation_paths": paths, "checkpoints": {"wm": CKS}, "n_train": 1,
             "curriculum_path": str(tmp_path / "qa.parquet")}
    outputs = {f"evolution_{e}": str(tmp_path / f"evolution.{e}") for e in ("csv", "md")}
    # pairs phase2-phase3 (a improves), phase2-phase4 (a improves, b regresses), phase3-phase4 (b regresses)
    assert write_catalog(WORLD_CATALOG, known, outputs, None) == {"pairs": 3, "min_contrast": 1}
    assert pd.read_csv(tmp_path / "evolution.csv")["contrast_size"].tolist() == [1, 2, 1]
    md = (tmp_path / "evolution.md").read_text()
    assert md.startswith(f"### {WORLD_CATALOG.tables[0].title}\n")
    assert md.endswith("\n\nwm exact match per checkpoint: phase1 0.333, phase2 0.667, phase3 1.000, phase4 0.667"
                       f"\n\n{CURRICULUM_NOTE}\n")
