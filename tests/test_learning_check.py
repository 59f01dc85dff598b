"""`selfknow check-estimators`: seed-averaged AUC, its bootstrap interval, the sd, pass/fail."""
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from selfknow.cli import main
from selfknow.protocols.persistent.hidden_probe import CS, probe_auc
from selfknow.protocols.persistent.learning_check import bootstrap_auc, check_estimators, trained_methods
from selfknow.readers.plain import write_plain


def _records(conf_by_seed, correct, method="oracle", checkpoint="phase3", dataset="d"):
    return pd.concat([pd.DataFrame({"item": [f"q{i}" for i in range(len(correct))], "checkpoint": checkpoint,
                                    "method": method, "correct": correct, "confidence": conf, "dataset": dataset,
                                    "seed": s, "role": "eval"})
                      for s, conf in enumerate(conf_by_seed)], ignore_index=True)


def test_seed_average_auc_matches_sklearn_on_a_hand_case():
    y = [1, 0, 1, 1, 0, 0, 1, 0]
    seed0 = [0.9, 0.1, 0.6, 0.4, 0.5, 0.2, 0.3, 0.7]
    seed1 = [0.7, 0.3, 0.4, 0.8, 0.5, 0.2, 0.5, 0.3]
    mean = np.mean([seed0, seed1], axis=0)  # 0.8 0.2 0.5 0.6 0.5 0.2 0.4 0.5: ties across classes
    cells = check_estimators(_records([seed0, seed1], y), n_boot=200)
    row = cells.iloc[0]
    assert row["auc"] == pytest.approx(roc_auc_score(y, mean))
    # by hand: positives 0.8, 0.5, 0.6, 0.4 against negatives 0.2, 0.5, 0.2, 0.5 -> 12 wins, 2 ties of 16
    assert row["auc"] == pytest.approx((12 + 0.5 * 2) / 16)
    assert row["sd"] == pytest.approx(np.std(mean))
    assert (row["n_questions"], row["n_correct"], row["n_seeds"]) == (8, 4, 2)


def test_bootstrap_interval_is_sklearn_auc_of_the_same_resamples():
    rng = np.random.default_rng(3)
    y = rng.random(60) < 0.4
    p = np.clip(0.3 * y + rng.random(60) * 0.7, 0, 1).round(2)
    lo, hi = bootstrap_auc(p, y, 300, seed=5)
    idx = np.random.default_rng(5).integers(0, 60, size=(300, 60))
    ref = [roc_auc_score(y[i], p[i]) for i in idx if 0 < y[i].sum() < 60]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])))
    assert lo < roc_auc_score(y, p) < hi


def test_pass_needs_interval_above_chance_and_a_non_constant_estimator():
    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.5).astype(int)
    good = np.clip(0.5 + 0.2 * (y - 0.5) + 0.1 * rng.standard_normal(400), 0, 1)
    noise = rng.random(400)
    flat = 0.3 + 1e-4 * y  # perfect ranking but constant to 1e-4
    recs = pd.concat([_records([good], y, "oracle"), _records([noise], y, "nonoracle"),
                      _records([flat], y, "gcm_trained"), _records([noise], y, "sc")], ignore_index=True)
    cells = check_estimators(recs, n_boot=500).set_index("method")
    assert list(cells.index) == ["nonoracle", "oracle", "gcm_trained"]  # catalog order; sc is model-free
    assert cells.loc["oracle", "passed"] and cells.loc["oracle", "auc_lo"] > 0.5
    assert not cells.loc["nonoracle", "passed"] and cells.loc["nonoracle", "auc_lo"] < 0.5
    assert cells.loc["gcm_trained", "auc"] == 1.0 and not cells.loc["gcm_trained", "passed"]


def test_one_class_cell_fails_and_train_rows_are_left_out():
    recs = pd.concat([_records([[0.2, 0.8, 0.4]], [1, 1, 1]),
                      _records([[0.2, 0.8, 0.4]], [0, 1, 0], checkpoint="phase1").assign(role="train")])
    cells = check_estimators(recs, n_boot=50)
    assert len(cells) == 1 and np.isnan(cells.loc[0, "auc"]) and not cells.loc[0, "passed"]


def test_trained_methods_are_the_model_backed_ones():
    names = trained_methods()
    assert {"nonoracle", "nonoracle_surrogate", "oracle_pooled", "gcm_trained", "gcm_trained_posthoc"} <= set(names)
    assert not {"sc", "end_correct", "sc_posthoc"} & set(names)


def test_cli_reports_cells_and_strict_exit(tmp_path, capsys):
    rng = np.random.default_rng(1)
    y = (rng.random(200) < 0.5).astype(int)
    recs = _records([rng.random(200), rng.random(200), rng.random(200)], y)
    write_plain(recs, tmp_path / "r.csv")
    assert main(["check-estimators", str(tmp_path / "r.csv"), "--bootstrap", "100", "--csv",
                 str(tmp_path / "cells.csv")]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 (method, dataset, checkpoint) cells pass" in out
    assert pd.read_csv(tmp_path / "cells.csv").loc[0, "n_seeds"] == 3
    assert main(["check-estimators", str(tmp_path / "r.csv"), "--bootstrap", "100", "--strict"]) == 1


def test_the_probe_without_scikit_learn_says_how_to_get_it(tmp_path, monkeypatch):
    """The core install has no scikit-learn: --probe stops first, naming the package."""
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(SystemExit, match="--probe needs scikit-learn.*pip install scikit-learn"):
        main(["check-estimators", str(tmp_path / "absent.csv"), "--probe"])


def test_probe_recovers_a_planted_direction_and_finds_none_in_noise():
    """Parameter recovery: correctness drawn from a logistic model on one hidden direction; the
    probe's held-out AUC approaches the true model's, and on pure noise its interval covers 0.5."""
    rng = np.random.default_rng(7)
    n, d = 600, 40
    x = rng.normal(size=(2 * n, d))
    w = np.zeros(d)
    w[3] = 1.5
    y = rng.random(2 * n) < 1 / (1 + np.exp(-x @ w))
    p, c = probe_auc(x[:n], y[:n], x[n:], seed=0)
    assert c in CS
    truth = roc_auc_score(y[n:], x[n:] @ w)
    assert truth - 0.03 < roc_auc_score(y[n:], p) <= truth + 0.01
    noise = rng.random(2 * n) < 0.4
    p, _ = probe_auc(x[:n], noise[:n], x[n:], seed=0)
    lo, hi = bootstrap_auc(p, noise[n:], 500, 0)
    assert lo < 0.5 < hi


def test_probe_needs_both_classes_in_training():
    x = np.zeros((10, 3))
    with pytest.raises(ValueError, match="at least 2 right and 2 wrong"):
        probe_auc(x, [True] * 9 + [False], x)


@pytest.mark.slow
def test_check_estimators_probe_on_the_tiny_run(tiny_run, capsys):
    assert main(["check-estimators", str(tiny_run), "--bootstrap", "50", "--probe"]) == 0
    out = capsys.readouterr().out.split("Logistic probe on the last hidden state")
    assert len(out) == 2 and "best_estimator_auc" in out[1]
    probe_rows = [ln for ln in out[1].splitlines() if ln.lstrip().startswith("world_qa_")]
    cell_pairs = {tuple(ln.split()[:3:2]) for ln in out[0].splitlines() if ln.lstrip().startswith("world_qa_")}
    assert {tuple(ln.split()[:2]) for ln in probe_rows} == cell_pairs
