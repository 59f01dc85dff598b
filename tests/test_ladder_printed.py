"""The LADDER paper's printed tables against `selfknow ladder-eval` on the authors' released
sessions (../shared/data/ladder-selfbound; printed/README.md: `tab:main` and
`tab:second_order_full` of yin1245/selfbound paper/main.tex, commit 332c13b).

Every cell of every printed row whose model has sessions there is compared at the printed
precision (three decimals, the percentage as an integer): the estimators that need no model
call from ladder-eval's own output, the prompted ones (ZS-SK, LSA, GT-SelfStats: a live model
call each) from the authors' released aggregates for the same sessions. A cell that cannot
match is listed in MISMATCH with the value we get and why; the test fails if such a cell starts
to match (the reason would no longer be true) as much as if any other cell differs.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from selfknow.cli import main
from selfknow.protocols.ladder.aggregate import read_released_aggregates

#: the paper's model names -> the released session files' agent_model
MODELS = {"Llama-3-8B": "Llama-3-8B", "DeepSeek-V3": "deepseek-v3.2", "Qwen2.5-7B": "qwen2.5-7b-instruct",
          "GPT-5.5": "gpt-5.5", "Claude-Opus-4-7": "claude-opus-4-7"}
#: printed column -> ladder-eval's estimator
COMPUTED = {"NoMem": "NoMemory", "UF-PDC": "UF-PDC", "Platt": "Platt-Online", "HistBin": "HistBin-Online",
            "Bayes": "Bayes-Domain", "EM": "EM-Joint", "OraPDC": "OraclePDC",
            "EM-Joint": "EM-Joint", "DS-asym": "Dawid-Skene", "GLAD": "GLAD"}
#: printed column -> the authors' released aggregate (a prompted baseline: a live model call)
PROMPTED = {"ZS-SK": "ZeroShot-SK", "LSA": "LLMSelfAssess", "GT-Stats": "GT-SelfStats"}
#: the label the main table prints in `Best`, per column (the argmax over the non-oracle ones)
BEST_LABEL = {"NoMem": "NoMem", "ZS-SK": "ZS", "LSA": "LSA", "UF-PDC": "UF-PDC", "Platt": "Platt",
              "HistBin": "HistBin", "Bayes": "Bayes", "EM": "EM"}

_OPEN_ZS = ("the released aggregate (ZeroShot-SK / LLMSelfAssess) equals NoMemory on the open and DashScope "
            "models: the printed value is not among the authors' released numbers (printed/README.md)")
_LLM_DECODER = ("the second-order table's EM-Joint for the nine non-frontier models is the LLM-decoder column of "
                "the appendix's decoder ablation (labels from a Qwen-Max classifier, not released); the frontier "
                "rows equal tab:main's rule-decoder EM, which we reproduce")
_SECOND_ORDER = ("docs/deviations.md `ladder-second-order-input`: our DS-asym / GLAD fit the decoded labels alone "
                 "(Dawid & Skene 1979, Whitehill et al. 2009, the appendix's per-state TPR/FPR); the printed values "
                 "need an input beyond them (the answers' confidence: a profile of mean confidence scores "
                 "GPT-5.5 0.921, Claude-Opus-4-7 0.684) and their script run_glad_ds.py is not released")
_ACCURACY = ("the printed accuracy is neither the released profile's overall_accuracy nor the sessions' "
             "accuracy (Llama-3-8B 52.2 / 52.4, GPT-5.5 81.5 / 92.8, Claude-Opus-4-7 89.7 / 42.2)")

#: (table, printed model, column) -> (printed, ours, why they cannot agree)
MISMATCH = {
    ("main", "Llama-3-8B", "accuracy"): ("55", "52", _ACCURACY),
    ("main", "GPT-5.5", "accuracy"): ("94", "82", _ACCURACY),
    ("main", "Claude-Opus-4-7", "accuracy"): ("69", "90", _ACCURACY),
    ("main", "Llama-3-8B", "ZS-SK"): ("0.711", "0.720", _OPEN_ZS),
    ("main", "Llama-3-8B", "LSA"): ("0.549", "0.720", _OPEN_ZS),
    ("main", "DeepSeek-V3", "ZS-SK"): ("0.673", "0.681", _OPEN_ZS),
    ("main", "DeepSeek-V3", "LSA"): ("0.721", "0.681", _OPEN_ZS),
    ("main", "DeepSeek-V3", "Best"): ("LSA", "EM", "follows from the printed LSA 0.721 (released 0.681)"),
    ("main", "Qwen2.5-7B", "ZS-SK"): ("0.663", "0.744", _OPEN_ZS),
    ("main", "Qwen2.5-7B", "LSA"): ("0.701", "0.744", _OPEN_ZS),
    ("second", "Llama-3-8B", "EM-Joint"): ("0.716", "0.731", _LLM_DECODER),
    ("second", "DeepSeek-V3", "EM-Joint"): ("0.708", "0.699", _LLM_DECODER),
    ("second", "Qwen2.5-7B", "EM-Joint"): ("0.760", "0.757", _LLM_DECODER),
    ("second", "Llama-3-8B", "ZS-SK"): ("0.682", "0.720", _OPEN_ZS),
    ("second", "DeepSeek-V3", "ZS-SK"): ("0.699", "0.681", _OPEN_ZS),
    ("second", "Qwen2.5-7B", "ZS-SK"): ("0.684", "0.744", _OPEN_ZS),
    ("second", "Llama-3-8B", "DS-asym"): ("0.646", "0.724", _SECOND_ORDER),
    ("second", "Llama-3-8B", "GLAD"): ("0.612", "0.732", _SECOND_ORDER),
    ("second", "DeepSeek-V3", "DS-asym"): ("0.702", "0.682", _SECOND_ORDER),
    ("second", "DeepSeek-V3", "GLAD"): ("0.738", "0.699", _SECOND_ORDER),
    ("second", "Qwen2.5-7B", "DS-asym"): ("0.774", "0.748", _SECOND_ORDER),
    ("second", "Qwen2.5-7B", "GLAD"): ("0.764", "0.757", _SECOND_ORDER),
    ("second", "GPT-5.5", "DS-asym"): ("0.834", "0.570", _SECOND_ORDER),
    ("second", "GPT-5.5", "GLAD"): ("0.909", "0.606", _SECOND_ORDER),
    ("second", "Claude-Opus-4-7", "DS-asym"): ("0.676", "0.557", _SECOND_ORDER),
    ("second", "Claude-Opus-4-7", "GLAD"): ("0.600", "0.573", _SECOND_ORDER),
}


@pytest.fixture(scope="module")
def ladder_dir(shared_data):
    d = shared_data / "ladder-selfbound"
    if not (d / "printed").is_dir():
        pytest.skip("ladder-selfbound/printed absent")
    return d


@pytest.fixture(scope="module")
def ours(ladder_dir, tmp_path_factory):
    """(model, estimator or released baseline) -> CBF: ladder-eval on the sessions, and the
    released aggregates of the prompted baselines."""
    out = tmp_path_factory.mktemp("printed")
    assert main(["ladder-eval", str(ladder_dir / "sessions"), str(out),
                 "--estimators", *sorted(set(COMPUTED.values()))]) == 0
    agg = pd.read_csv(out / "import_aggregates.csv")
    cbf = {(r.model, r.baseline): r.CBF for r in agg.itertuples()}
    released = read_released_aggregates(ladder_dir / "aggregates")
    cbf |= {(r.model, r.baseline): r.CBF for r in released.itertuples() if r.baseline in PROMPTED.values()}
    accuracy = {}
    for f in sorted((ladder_dir / "sessions").glob("capbound_sessions_*.json")):
        meta = json.loads(f.read_text(encoding="utf-8"))["metadata"]
        accuracy[meta["agent_model"]] = meta["agent_profile"]["overall_accuracy"]
    # the rows left out are the models without sessions here and the means over all 19 or a tier
    assert set(accuracy) == set(MODELS.values())
    return cbf, accuracy


def _printed(ladder_dir, name):
    return pd.read_csv(ladder_dir / "printed" / name, dtype=str).set_index("model")


def _cells(table, printed, cbf, accuracy):
    """(key, printed text, our text) for every cell of the rows with released sessions."""
    for model, row in printed.iterrows():
        if model not in MODELS:
            continue
        m = MODELS[model]
        ours_row = {}
        for col in printed.columns:
            if col in COMPUTED:
                ours_row[col] = f"{cbf[(m, COMPUTED[col])]:.3f}"
            elif col in PROMPTED:
                ours_row[col] = f"{cbf[(m, PROMPTED[col])]:.3f}"
        if "accuracy" in printed.columns:
            ours_row["accuracy"] = f"{round(100 * accuracy[m]):d}"
        if "Best" in printed.columns:
            ours_row["Best"] = BEST_LABEL[max(BEST_LABEL, key=lambda c: float(ours_row[c]))]
        assert set(ours_row) == set(printed.columns), f"{table}: columns we do not compare: {set(printed.columns) - set(ours_row)}"
        for col in printed.columns:
            yield (table, model, col), row[col], ours_row[col]


@pytest.mark.parametrize("table,name", [("main", "main_table.csv"), ("second", "second_order_table.csv")])
def test_printed_table_cell_by_cell(ladder_dir, ours, table, name):
    cbf, accuracy = ours
    printed = _printed(ladder_dir, name)
    cells = list(_cells(table, printed, cbf, accuracy))
    assert {k[1] for k, _, _ in cells} == set(MODELS), "every model with released sessions is printed"
    differ, explained_but_equal = [], []
    for key, want, got in cells:
        if key in MISMATCH:
            if got == want or MISMATCH[key][:2] != (want, got):
                explained_but_equal.append((key, want, got, MISMATCH[key][:2]))
        elif got != want:
            differ.append((key, want, got))
    assert differ == [], f"cells that differ from the paper's print (printed, ours): {differ}"
    assert explained_but_equal == [], f"MISMATCH entries that no longer hold (cell, printed, ours, listed): {explained_but_equal}"
    matched = sum(1 for k, _, _ in cells if k not in MISMATCH)
    listed = sum(1 for k in MISMATCH if k[0] == table)
    assert matched + listed == len(cells)

