"""The importer of the LADDER authors' released sessions, and reproduction of their released
aggregates (../shared/data/ladder-selfbound, yin1245/selfbound commit 332c13b).

Definitions that had to be inferred, and from what (all from the authors' released scorer,
yin1245/selfbound code/baselines/{capbound,classic}_baselines_v4.py, read as a specification,
and checked here against the released numbers):
  - Per-session metrics are rounded (ECE, Brier, HR: 4 decimals; AUROC, CBF: 3) and then
    averaged over the 50 sessions (`compute_session_metrics`; the data README says so for CBF).
  - ECE: bins [e_i, e_{i+1}) on np.linspace(0, 1, 11); confidence 1.0 falls in no bin but
    counts in the denominator. SPEC's variant (1 in the last bin) gives Llama-3-8B NoMemory
    ECE 0.411 instead of the released 0.187 (test below).
  - AUROC is 0.5 for a session with one outcome class; HR = share of wrong answers among
    answers with confidence > 0.7, 0 when none.
  - Per-turn confidences of every baseline are produced before the turn's feedback is
    observed (predict_confidence precedes observe).
  - UF-PDC counts "uncertain" replies as negatives; every other baseline uses strict labels.
  - EM-Joint: r_in = 0.7 / r_out = 0.5 initial, +1/+2 smoothing, batch EM at session end.
  - CBF: domains with >= 2 turns in the session, including unparsed answers (scored wrong).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import run_snakemake
from selfknow.protocols.ladder.aggregate import read_released_aggregates, score_sessions
from selfknow.protocols.ladder.feedback import decode_feedback
from selfknow.protocols.ladder.records import NON_MMLU_DOMAINS, TURN_COLUMNS, import_sessions
from selfknow.protocols.ladder.estimators import RELEASED_OFFLINE
from selfknow.protocols.ladder.tables import IMPORT_ESTIMATORS, import_job
from selfknow.protocols.ladder.metrics import ece

METRICS = ["CBF", "ECE", "Brier", "AUROC", "HR"]
MODELS = ["Llama-3-8B", "claude-opus-4-7", "deepseek-v3.2", "gpt-5.5", "qwen2.5-7b-instruct"]


@pytest.fixture(scope="module")
def ladder_dir(shared_data):
    d = shared_data / "ladder-selfbound"
    if not d.is_dir():
        pytest.skip("ladder-selfbound data absent")
    return d


@pytest.fixture(scope="module")
def turns(ladder_dir):
    return import_sessions(ladder_dir / "sessions")


@pytest.fixture(scope="module")
def reproduced(ladder_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder") / "import_aggregates.csv"
    import_job(str(ladder_dir / "sessions"), {"import_aggregates_csv": str(out),
                                             "import_aggregates_md": str(out.with_suffix(".md"))},
               RELEASED_OFFLINE)
    return pd.read_csv(out), out


def test_importer_schema_and_quirks(turns):
    assert list(turns.columns) == TURN_COLUMNS
    assert sorted(turns.model.unique()) == sorted(MODELS)
    assert (turns.groupby("model").size() == 2500).all()
    assert (turns.groupby(["model", "session_id"]).size() == 50).all()
    # upstream quirk: unparsed answers (agent_answer null) are kept and scored wrong
    unparsed = turns[~turns.parsed]
    assert len(unparsed) == 21 + 1333 + 669 + 38
    assert not unparsed.correct.any()
    # the released pool: 20 subjects x at most 25 questions, plus (paper §B.1) 232
    # numerical math-word-problem turns in the Llama archive. The released aggregates
    # include them (the reproduction below needs them); the paper's 20-subject target
    # drops them: records.NON_MMLU_DOMAINS.
    extra = turns[turns.domain.isin(NON_MMLU_DOMAINS)]
    assert len(extra) == 232 and set(extra.model) == {"Llama-3-8B"}
    mmlu = turns[~turns.domain.isin(NON_MMLU_DOMAINS)]
    assert mmlu.domain.nunique() == 20
    assert mmlu.groupby("domain").item_id.nunique().max() <= 25
    assert turns.confidence.between(0, 1).all()


def test_reproduces_released_aggregates(reproduced, ladder_dir):
    agg, out = reproduced
    released = read_released_aggregates(ladder_dir / "aggregates")
    m = agg.merge(released, on=["model", "baseline"], suffixes=("", "_released"), validate="1:1")
    assert len(m) == len(MODELS) * len(RELEASED_OFFLINE)
    diff = pd.DataFrame({k: (m[k] - m[f"{k}_released"]).abs() for k in METRICS})
    bad = m.loc[(diff > 0.001).any(axis=1), ["model", "baseline"]]
    assert bad.empty, f"not reproduced within 0.001:\n{bad}\n{diff.max()}"
    written = pd.read_csv(out)
    assert list(written.columns) == ["model", "baseline", "CBF", "ECE", "Brier", "AUROC", "HR"]
    assert len(written) == len(agg)


@pytest.mark.slow
def test_the_workflow_imports_released_sessions_with_the_default_settings(ladder_dir, tmp_path):
    """The README's import in the DAG (`--config ladder_import_dir=DIR`, default
    `ladder_import_estimators: []`) builds the import table: the importer's estimators, the
    released ones equal to the released aggregates; a listed estimator adds to them."""
    results = tmp_path / "results"
    table = results / "tables" / "ladder" / "import_aggregates.csv"
    run_snakemake(str(table), "--cores", "1", "--config", f"results={results}",
                  f"ladder_import_dir={ladder_dir / 'sessions'}")
    written = pd.read_csv(table)
    assert set(written["baseline"]) == set(IMPORT_ESTIMATORS) and set(written["model"]) == set(MODELS)
    released = read_released_aggregates(ladder_dir / "aggregates")
    m = written.merge(released, on=["model", "baseline"], suffixes=("", "_released"), validate="1:1")
    assert len(m) == len(MODELS) * len(RELEASED_OFFLINE)
    assert (np.abs(m[METRICS].to_numpy() - m[[f"{k}_released" for k in METRICS]].to_numpy()) <= 0.001).all()


def test_listed_import_estimators_add_to_the_importers(monkeypatch, tmp_path):
    from selfknow.protocols.ladder import rule_jobs, tables

    seen = {}
    monkeypatch.setattr(rule_jobs, "table_job_provenance", lambda *a, **k: {})
    monkeypatch.setattr(tables, "import_job", lambda src, out, est, **k: seen.setdefault("est", est))
    outputs = {"import_aggregates_csv": "a.csv", "import_aggregates_md": "a.md"}
    rule_jobs.import_job("dir", [], outputs, {}, {})
    assert seen.pop("est") == IMPORT_ESTIMATORS
    rule_jobs.import_job("dir", ["EM-Joint", "Extra"], outputs, {}, {})
    assert seen["est"] == [*IMPORT_ESTIMATORS, "Extra"]


def test_spec_ece_variant_would_not_reproduce(turns):
    # Why metrics.ece keeps the authors' bins: half of Llama-3-8B's confidences are exactly 1.
    g = turns[turns.model == "Llama-3-8B"]
    ours = np.mean([round(ece(s.confidence, s.correct), 4) for _, s in g.groupby("session_id")])
    spec = np.mean([round(ece(s.confidence, s.correct, include_one=True), 4) for _, s in g.groupby("session_id")])
    assert ours == pytest.approx(0.1868, abs=1e-4)
    assert spec > 0.4


def test_frozen_rules_decode_released_replies(turns):
    # Released replies with the class the authors' rules assign (negative > uncertain >
    # positive > neutral), including priority conflicts.
    cases = {
        "That's right, the one cycle surge current would indeed be C.": "positive",
        "I'm afraid the correct answer isn't D.": "neutral",
        "Hmm, I'm not sure about that. Could you maybe check the source again?": "uncertain",
        "Could you elaborate on what C represents in this context?": "neutral",
        # a follow-up question that merely contains "incorrect" is a frozen-rule false negative
        "Could you please provide more context or elaborate on why statement A is incorrect?": "negative",
    }
    got = decode_feedback(list(cases), "frozen").decoded_category.tolist()
    # "I'm afraid the correct answer isn't D." matches no frozen pattern ("the correct answer
    # is" needs "is", "afraid that's not" needs "that's"): a miss the expanded set fixes.
    assert got == list(cases.values())
    assert decode_feedback(["I'm afraid the correct answer isn't D."], "expanded").decoded_category[0] == "negative"
    # the importer's decoded columns are the frozen rules' strict labels
    d = decode_feedback(turns.feedback_text, "frozen")
    assert (d.decoded_category.to_numpy() == turns.decoded_category.to_numpy()).all()
    counts = turns.decoded_category.value_counts().to_dict()
    assert counts == {"neutral": 10690, "positive": 1173, "negative": 371, "uncertain": 266}


def test_score_sessions_other_estimators_on_released(turns):
    g = turns[(turns.model == "gpt-5.5") & turns.session_id.isin([str(i) for i in range(10)])]
    per = score_sessions(g, ["Global", "Count", "Bayes-Domain", "OraclePDC"], authors_rounding=True)
    mean = per.groupby("estimator").CBF.mean()
    assert mean["OraclePDC"] == 1.0
    # paper §4.2: on GPT-5.5 the Global mean beats the domain-specific estimators
    assert mean["Global"] > mean["Count"] and mean["Global"] > mean["Bayes-Domain"]
