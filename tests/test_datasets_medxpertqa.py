"""MedXpertQA (Text) for LCAE, on rows in TsinghuaC3I/MedXpertQA's schema: the question's own
"Answer Choices:" block is cut so the prompt shows the options once."""
from __future__ import annotations

import pandas as pd
import pytest

from selfknow.stages.datasets import medxpertqa
from selfknow.stages.datasets.source import ItemError
from selfknow.stages.items import build_items

ROW = {"id": "Text-0", "medical_task": "Diagnosis", "body_system": "Cardiovascular", "question_type": "Reasoning",
       "question": "A 54-year-old man has chest pain. What is the diagnosis?\nAnswer Choices: (A) MI (B) PE (C) GERD",
       "options": {"A": "MI", "B": "PE", "C": "GERD"}, "label": "B"}


def test_answer_choices_cut_and_options_in_letter_order(tmp_path):
    rows = [ROW, {**ROW, "id": "Text-1", "question": "No choices listed here?", "options": {"B": "y", "A": "x"},
                  "label": "A"}]
    pd.DataFrame(rows).to_parquet(tmp_path / "test.parquet")
    test = build_items("medxpertqa", {"loader": "medxpertqa", "path": str(tmp_path)}, seed=0)["test"]
    assert list(test.question) == ["A 54-year-old man has chest pain. What is the diagnosis?", "No choices listed here?"]
    assert [list(c) for c in test.choices] == [["MI", "PE", "GERD"], ["x", "y"]]
    assert list(test.answer) == ["B", "A"] and list(test.domain) == ["Diagnosis", "Diagnosis"]


def test_label_outside_the_options_names_the_row():
    with pytest.raises(ItemError, match=r"fixture: row 1 \(id 'Text-0'\): label 'D' is not one of \['A', 'B', 'C'\]"):
        medxpertqa.process([{**ROW, "label": "D"}], "med", "fixture")
