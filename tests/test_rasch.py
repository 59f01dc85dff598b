"""Rasch estimator (lcae Stage 1, SPEC §3): recovery, independent references, extremes, fit."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy.optimize import brentq, minimize
from scipy.special import expit

from selfknow.stats.item_fit import band_counts, fit_band, fit_statistics, item_fit_table
from selfknow.stats.rasch import (as_response_matrix, estimate_abilities, find_extremes, fit_rasch,
                                  irt_item_error_p, irt_model_error_p, response_matrix)


def simulate(theta, b, seed):
    rng = np.random.default_rng(seed)
    return (rng.random((theta.size, b.size)) < expit(theta[:, None] - b[None, :])).astype(float)


@pytest.fixture(scope="module")
def truth():
    rng = np.random.default_rng(42)
    theta = rng.normal(0.0, 1.0, 500)
    b = rng.normal(0.0, 1.0, 200)
    return theta, b - b.mean()


# ----------------------------------------------------------------------------- recovery

def test_jml_recovery_500x200(truth):
    """r(b) > 0.99, r(θ) > 0.95, and difficulty bias < 0.05 logits.

    "Bias" is measured per item over 10 replications with the same θ, b: the mean over
    items of |mean_rep(b̂ − b)| after centring (the stricter of the two measures; a single
    replicate's MAE is dominated by the sampling SE of ~0.1 logits). The |mean signed
    error| after centring is reported as well and is 0 by construction of the scale."""
    theta, b = truth
    errors = []
    for rep in range(10):
        fit = fit_rasch(simulate(theta, b, seed=rep), "jml")
        assert fit.converged
        bc = fit.b - fit.b.mean()
        assert np.corrcoef(bc, b)[0, 1] > 0.99
        assert np.corrcoef(fit.theta, theta)[0, 1] > 0.95
        errors.append(bc - b)
    errors = np.array(errors)
    per_item_bias = np.abs(errors.mean(axis=0)).mean()
    signed = abs(errors.mean())
    assert per_item_bias < 0.05, per_item_bias
    assert signed < 1e-9


def test_cml_recovery_500x200(truth):
    theta, b = truth
    fit = fit_rasch(simulate(theta, b, seed=0), "cml")
    assert fit.converged
    assert np.corrcoef(fit.b, b)[0, 1] > 0.99
    assert np.corrcoef(fit.theta, theta)[0, 1] > 0.95
    assert abs(fit.b.mean()) < 1e-9  # scale: mean difficulty 0
    # single replicate: the error is the sampling error, SE ≈ 0.1
    assert np.abs(fit.b - b).mean() < 0.12
    assert np.all(np.abs(fit.b - b) < 4 * fit.se_b)


def test_bias_correction_short_test():
    """JML inflates difficulties by about L/(L−1) on a 10-item test; the (L−1)/L factor and
    CML both remove it."""
    rng = np.random.default_rng(5)
    theta, b = rng.normal(0.0, 1.0, 2000), np.linspace(-1.5, 1.5, 10)
    X = simulate(theta, b, seed=6)
    slope = {}
    for name, method, corr in (("raw", "jml", False), ("jml", "jml", True), ("cml", "cml", True)):
        slope[name] = np.polyfit(b, fit_rasch(X, method, bias_correction=corr).b, 1)[0]
    assert slope["raw"] > 1.07
    assert abs(slope["jml"] - 1.0) < 0.04
    assert abs(slope["cml"] - 1.0) < 0.04


def test_missing_data_recovery():
    """20 % of cells missing at random. (CML cost grows with the number of distinct
    missingness patterns — here nearly one per person — so the matrix is kept small.)"""
    rng = np.random.default_rng(7)
    theta, b = rng.normal(0.0, 1.0, 300), np.linspace(-2.0, 2.0, 20)
    X = simulate(theta, b, seed=8)
    X[rng.random(X.shape) < 0.2] = np.nan
    for method in ("jml", "cml"):
        fit = fit_rasch(X, method)
        assert fit.converged
        assert np.corrcoef(fit.b, b)[0, 1] > 0.98  # ~240 responses per item: SE ≈ 0.15
        assert np.abs(fit.b - b).max() < 0.5
        assert np.corrcoef(fit.theta, theta)[0, 1] > 0.8  # ~20 answered items: SE ≈ 0.55


def test_cml_linked_forms():
    """Two test forms sharing 5 anchor items (missing by design): the pattern-group CML puts
    both forms on one scale."""
    rng = np.random.default_rng(11)
    b = np.linspace(-2.0, 2.0, 15)
    theta = np.concatenate([rng.normal(-0.5, 1.0, 600), rng.normal(0.5, 1.0, 600)])
    X = simulate(theta, b, seed=12)
    X[:600, 10:] = np.nan
    X[600:, :5] = np.nan
    fit = fit_rasch(X, "cml")
    assert np.abs(fit.b - b).max() < 0.3


# ----------------------------------------------------------------------------- references

def test_cml_matches_girth_rasch_conditional():
    """girth's `rasch_conditional` is CML with Σb = 0, trimming all-0/all-1 patterns (its
    input is items x persons; it cannot take missing data)."""
    girth = pytest.importorskip("girth")
    rng = np.random.default_rng(3)
    X = simulate(rng.normal(0.0, 1.0, 300), np.linspace(-2.0, 2.0, 20), seed=4)
    g = girth.rasch_conditional(X.astype(int).T)["Difficulty"]
    ours = fit_rasch(X, "cml").b
    assert np.abs((g - g.mean()) - ours).max() < 0.02


def test_cml_matches_brute_force_conditional_likelihood():
    """Conditional likelihood written out by enumerating all 2^L patterns, optimised by a
    generic optimiser: no elementary symmetric functions involved."""
    rng = np.random.default_rng(9)
    L = 5
    X = simulate(rng.normal(0.0, 1.0, 400), np.array([-1.0, -0.3, 0.0, 0.6, 1.2]), seed=10)
    pats = np.array(list(itertools.product([0, 1], repeat=L)), dtype=float)
    r_pat = pats.sum(axis=1)
    r = X.sum(axis=1)
    keep = (r > 0) & (r < L)

    Xk = X[keep]
    n_r = np.bincount(r[keep].astype(int), minlength=L + 1)

    def nll(b):
        # −Σ_persons log[ exp(−x·b) / Σ_{patterns y with the person's score} exp(−y·b) ]
        logw = -pats @ b
        denom = sum(n_r[k] * np.log(np.exp(logw[r_pat == k]).sum()) for k in range(1, L))
        return float(Xk.sum(axis=0) @ b + denom)

    ref = minimize(nll, np.zeros(L), method="BFGS", options={"gtol": 1e-8}).x
    ref -= ref.mean()
    assert np.abs(fit_rasch(X, "cml").b - ref).max() < 1e-4


def test_jml_matches_direct_joint_likelihood():
    """Uncorrected JML b equals the maximiser of the joint likelihood found by a generic
    optimiser over all θ and b (mean b = 0)."""
    rng = np.random.default_rng(13)
    X = simulate(rng.normal(0.0, 1.0, 40), np.linspace(-1.5, 1.5, 8), seed=14)
    X[0, 0], X[1, 3] = np.nan, np.nan
    ext = find_extremes(X)
    X = X[~ext.rows][:, ~ext.cols]
    n, L = X.shape
    obs = ~np.isnan(X)
    Xz = np.nan_to_num(X)

    def nll(p):
        th, bb = p[:n], p[n:]
        eta = th[:, None] - bb[None, :]
        ll = np.where(obs, Xz * eta - np.logaddexp(0.0, eta), 0.0).sum()
        return -ll + 0.5 * bb.sum() ** 2

    ref = minimize(nll, np.zeros(n + L), method="BFGS", options={"gtol": 1e-9}).x[n:]
    ref -= ref.mean()
    ours = fit_rasch(X, "jml", bias_correction=False)
    assert ours.bias_correction == 1.0
    assert np.abs(ours.b - ref).max() < 1e-4


def test_wle_and_mle_match_root_finding():
    rng = np.random.default_rng(15)
    b = rng.normal(0.0, 1.0, 12)
    X = simulate(rng.normal(0.0, 1.5, 30), b, seed=16)
    X[0] = 1.0
    X[1] = 0.0
    X[2, :4] = np.nan
    wle, se = estimate_abilities(X, b, "wle")
    mle, _ = estimate_abilities(X, b, "mle")
    for i in range(X.shape[0]):
        o = ~np.isnan(X[i])
        x, bb = X[i, o], b[o]

        def warm(t):
            p = expit(t - bb)
            w = p * (1 - p)
            return (x - p).sum() + (w * (1 - 2 * p)).sum() / (2 * w.sum())

        assert wle[i] == pytest.approx(brentq(warm, -20, 20, xtol=1e-12), abs=1e-6)
        s = x.sum()
        s = 0.3 if s == 0 else (x.size - 0.3 if s == x.size else s)
        assert mle[i] == pytest.approx(brentq(lambda t: s - expit(t - bb).sum(), -20, 20, xtol=1e-12), abs=1e-6)
        p = expit(wle[i] - bb)
        assert se[i] == pytest.approx(1 / np.sqrt((p * (1 - p)).sum()), rel=1e-9)
    assert np.isfinite(wle).all() and wle[0] == wle.max() and wle[1] == wle.min()


def test_anchored_abilities_recover_truth():
    rng = np.random.default_rng(17)
    theta, b = rng.normal(0.0, 1.0, 300), rng.normal(0.0, 1.0, 100)
    stage1 = fit_rasch(simulate(theta, b, seed=18), "jml")
    shifted = theta + 0.5  # e.g. answers revised after reflection
    th2, se2 = estimate_abilities(simulate(shifted, b, seed=19), stage1.b)
    assert np.corrcoef(th2, shifted)[0, 1] > 0.9
    assert abs((th2 - stage1.theta).mean() - 0.5) < 0.15  # on the Stage-1 scale
    assert np.all(se2 > 0)
    with pytest.raises(ValueError, match="finite difficulties"):
        estimate_abilities(np.ones((2, 3)), [0.0, np.nan, 1.0])


# ----------------------------------------------------------------------------- extremes

def test_extreme_rows_and_columns():
    rng = np.random.default_rng(21)
    X = simulate(rng.normal(0.0, 1.0, 60), np.linspace(-1.0, 1.0, 8), seed=22)
    X[:, 7] = 1.0                       # item everyone solves
    X[:, 6] = 0.0                       # item nobody solves
    X[0, :6] = 1.0                      # all correct on the informative items only:
    X[1, :] = 0.0                       # all wrong
    X[2, :] = np.nan                    # no responses
    X[3, :6] = np.nan                   # only items 6 (wrong) and 7 (right) answered
    ext = find_extremes(X)
    assert ext.col_status[7] == "all_correct" and ext.col_status[6] == "all_wrong"
    assert ext.row_status[0] == "all_correct"   # extreme once item 6 is set aside
    assert ext.row_status[1] == "all_wrong" and ext.row_status[2] == "no_responses"
    # pass 1 drops row 1 and column 6; pass 2 then sees column 7 all correct and row 3
    # (item 7 only) all correct: the search is iterative
    assert ext.row_status[3] == "all_correct"
    fit = fit_rasch(X, "jml")
    assert set(fit.extreme_rows) >= {0, 1, 2, 3} and set(fit.extreme_cols) == {6, 7}
    ok = np.ones(8, bool)
    ok[[6, 7]] = False
    assert abs(fit.b[ok].mean()) < 1e-12
    assert fit.b[7] < fit.b[ok].min() and fit.b[6] > fit.b[ok].max()
    assert np.isfinite(fit.theta[[0, 1]]).all() and np.isnan(fit.theta[[2, 3]]).all()
    assert fit.theta[0] == np.nanmax(fit.theta) and fit.theta[1] == np.nanmin(fit.theta)
    assert np.isnan(fit.infit_item[[6, 7]]).all() and np.isnan(fit.outfit_person[0])
    table = item_fit_table(fit)
    assert list(table.loc[[6, 7], "band"]) == ["", ""]


def test_degenerate_and_bad_input():
    with pytest.raises(ValueError, match="row 1, column 2"):
        as_response_matrix([[0, 1, 1], [1, 0, 2]])
    with pytest.raises(ValueError, match="non-extreme"):
        fit_rasch(np.ones((5, 4)))
    with pytest.raises(ValueError, match="method"):
        fit_rasch(np.eye(3), "mml")


# ----------------------------------------------------------------------------- fit stats

def test_fit_statistics_hand_computed():
    """θ = 0; b = (0, ln 3) → p = (1/2, 1/4). Person x = (0, 1): z² = 1 and 3, so outfit = 2;
    infit = (1/4 + 9/16) / (1/4 + 3/16) = 13/7. Item 1 over persons x = 0, 1 at p = 1/2:
    z² = 1 each → both MNSQ = 1."""
    X = np.array([[0.0, 1.0], [1.0, 0.0]])
    fs = fit_statistics(X, np.zeros(2), np.array([0.0, np.log(3.0)]))
    assert fs.outfit_person[0] == pytest.approx(2.0)
    assert fs.infit_person[0] == pytest.approx(13 / 7)
    assert fs.outfit_item[0] == pytest.approx(1.0) and fs.infit_item[0] == pytest.approx(1.0)
    # item 2: x = (1, 0) at p = 1/4: z² = 3 and 1/3 → outfit 5/3; infit (9/16+1/16)/(3/8) = 5/3
    assert fs.outfit_item[1] == pytest.approx(5 / 3) and fs.infit_item[1] == pytest.approx(5 / 3)


def test_fit_statistics_match_loop_with_missing():
    rng = np.random.default_rng(23)
    th, b = rng.normal(size=15), rng.normal(size=9)
    X = simulate(th, b, seed=24)
    X[rng.random(X.shape) < 0.2] = np.nan
    fs = fit_statistics(X, th, b)
    for j in range(b.size):
        o = ~np.isnan(X[:, j])
        p = expit(th[o] - b[j])
        z2 = (X[o, j] - p) ** 2 / (p * (1 - p))
        assert fs.outfit_item[j] == pytest.approx(z2.mean())
        assert fs.infit_item[j] == pytest.approx(((X[o, j] - p) ** 2).sum() / (p * (1 - p)).sum())
    for i in range(th.size):
        o = ~np.isnan(X[i])
        p = expit(th[i] - b[o])
        assert fs.outfit_person[i] == pytest.approx(((X[i, o] - p) ** 2 / (p * (1 - p))).mean())


def test_fit_bands():
    bands = fit_band([1.0, 0.4, 1.6, 1.0, 2.1, np.nan], [1.2, 1.0, 1.4, 1.9, 1.0, 1.0])
    assert list(bands) == ["acceptable", "marginal", "marginal", "marginal", "severe", ""]
    assert band_counts([1.0, 2.5], [1.0, 1.0]) == {"acceptable": 1, "marginal": 0, "severe": 1}


def test_misfitting_item_is_flagged(truth):
    theta, b = truth
    X = simulate(theta, b, seed=25)
    X[:, 0] = (theta < 0).astype(float)  # reversed: the weak examinees get item 0 right
    fit = fit_rasch(X, "jml")
    assert fit.outfit_item[0] > 2.0 and fit_band(fit.infit_item, fit.outfit_item)[0] == "severe"
    assert (fit_band(fit.infit_item, fit.outfit_item)[1:] == "acceptable").mean() > 0.95


def test_irt_error_probabilities():
    theta, b = np.array([0.0, 1.0]), np.array([0.0, 1.0, -1.0])
    e = irt_model_error_p(theta, b)
    assert e.shape == (2, 3)
    assert e[0, 0] == pytest.approx(0.5) and e[1, 1] == pytest.approx(0.5)
    assert e[1, 0] == pytest.approx(1 - 1 / (1 + np.exp(-1)))
    assert np.allclose(irt_item_error_p(theta, b), e.mean(axis=0))
    assert np.allclose(irt_item_error_p([0.0, 1.0, np.nan], b), e.mean(axis=0))


# ----------------------------------------------------------------------------- long -> wide

def test_response_matrix_rules():
    ex = ["m1", "m1", "m1", "m1", "m2", "m2", "m1"]
    it = ["q1", "q1", "q1", "q2", "q1", "q2", "q3"]
    y = [0, 1, 1, 1, 1, 0, 1]
    M, e, i = response_matrix(ex, it, y, rule="first")
    assert e == ["m1", "m2"] and i == ["q1", "q2"]       # q3 not common
    assert M.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    M, _, _ = response_matrix(ex, it, y, rule="majority")
    assert M.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    M, _, i = response_matrix(ex, it, y, common_items=False)
    assert i == ["q1", "q2", "q3"] and np.isnan(M[1, 2])


def _ladder_long(shared_data):
    files = sorted((shared_data / "ladder-selfbound" / "sessions").glob("*.json"))
    if len(files) != 5:
        pytest.skip("LADDER sessions not complete")
    ex, it, y = [], [], []
    for f in files:
        d = json.loads(f.read_text())
        model = d["metadata"]["agent_model"]
        for s in d["sessions"]:          # session order, then turn order: "first" is the first exposure
            for t in s["log"]:
                g = t["gt_correct"]
                ex.append(model)
                it.append(f"{t['domain']}::{t['question']}")
                y.append(float(g if isinstance(g, bool) else str(g) == "True"))
    return ex, it, y


def test_ladder_real_matrix(shared_data):
    """5 LADDER models x the items all five saw; repeated exposures → the first answer."""
    ex, it, y = _ladder_long(shared_data)
    M, models, items = response_matrix(ex, it, y, rule="first")
    assert M.shape[0] == 5 and M.shape[1] >= 400 and not np.isnan(M).any()
    fit = fit_rasch(M, "jml")
    assert fit.converged
    cols = fit.col_status
    # an all-correct column is all ones over the calibrated rows, and the like
    rows = fit.row_status == ""
    assert np.all(M[np.ix_(rows, cols == "all_correct")] == 1)
    assert np.all(M[np.ix_(rows, cols == "all_wrong")] == 0)
    assert np.all(M[:, cols == ""].std(axis=0) > 0)
    assert (cols != "").sum() > 0 and np.isfinite(fit.b).all() and np.isfinite(fit.theta).all()
    acc = M.mean(axis=1)
    assert np.array_equal(np.argsort(fit.theta), np.argsort(acc))  # complete data: θ monotone in score
    print("LADDER", M.shape, dict(zip(models, np.round(fit.theta, 2))),
          {s: int((cols == s).sum()) for s in ("all_correct", "all_wrong")},
          "extreme rows:", [models[i] for i in fit.extreme_rows])


# ----------------------------------------------------------------------------- CLI

def test_cli_rasch_writes_outputs(tmp_path):
    import pandas as pd

    from selfknow.cli import main

    rng = np.random.default_rng(31)
    X = simulate(rng.normal(0.0, 1.0, 40), np.linspace(-1.5, 1.5, 6), seed=32)
    X[:, 5] = 1.0                # an item everyone solves
    X[0] = 0.0                   # an examinee with everything wrong
    lines = ["examinee," + ",".join(f"q{j}" for j in range(6))]
    for i, row in enumerate(X):
        cells = ["" if (i == 3 and j == 2) else str(int(v)) for j, v in enumerate(row)]
        lines.append(f"m{i}," + ",".join(cells))
    csv = tmp_path / "matrix.csv"
    csv.write_text("\n".join(lines) + "\n")
    assert main(["rasch", str(csv), str(tmp_path / "out"), "--method", "cml"]) == 0
    ab = pd.read_csv(tmp_path / "out" / "abilities.csv")
    di = pd.read_csv(tmp_path / "out" / "difficulties.csv", keep_default_na=False)
    info = json.loads((tmp_path / "out" / "fit.json").read_text())
    assert list(ab["examinee"]) == [f"m{i}" for i in range(40)] and ab.loc[3, "n_responses"] == 5
    assert {"b", "se_b", "infit", "outfit", "band", "status"} <= set(di.columns)
    assert info["method"] == "cml" and info["converged"]
    assert {"examinee": "m0", "status": "all_wrong"} in info["extreme_rows"]
    assert info["extreme_cols"] == [{"item": "q5", "status": "all_correct"}]
    # the same numbers as calling the library on the same matrix
    X[3, 2] = np.nan
    fit = fit_rasch(X, "cml")
    assert np.allclose(ab["theta"], fit.theta) and np.allclose(di["b"].astype(float), fit.b)


def test_cli_rasch_bad_value(tmp_path, capsys):
    from selfknow.cli import main

    csv = tmp_path / "bad.csv"
    csv.write_text("examinee,q1,q2,q3\nm1,1,0,1\nm2,0,yes,1\n")
    assert main(["rasch", str(csv), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "bad.csv: line 3 (examinee 'm2'), column 'q2': 'yes' is not 0, 1 or blank" in err
    assert not (tmp_path / "out").exists()
    csv.write_text("examinee,q1,q2\nm1,1,0\nm2,0\n")
    assert main(["rasch", str(csv), str(tmp_path / "out")]) == 2
    assert "line 3: 2 fields, header has 3" in capsys.readouterr().err


def test_cli_registry_rejects_duplicates():
    from selfknow.cli import COMMANDS, register

    assert "rasch" in COMMANDS
    with pytest.raises(ValueError, match="already registered"):
        register("rasch", "again", lambda p: None, lambda a: 0)


# ----------------------------------------------------------------------------- sparse, files

def _missing_matrix(seed, n=40, L=12, missing=0.3):
    rng = np.random.default_rng(seed)
    X = simulate(rng.normal(0.0, 1.0, n), np.linspace(-1.5, 1.5, L), seed=seed + 1)
    X[rng.random(X.shape) < missing] = np.nan
    return X


def test_sparse_blocks_match_dense(monkeypatch):
    """The same fit whether the cells are walked in one block or in blocks of about 37 cells
    (block boundaries every few rows, an empty row among them), and whether the input is
    dense or already sparse."""
    from selfknow.stats import responses

    X = _missing_matrix(41)
    X[5] = np.nan                       # an empty row, inside a block
    R = responses.Responses.from_dense(X)
    assert np.array_equal(R.to_dense(), X, equal_nan=True) and R.n_cells == (~np.isnan(X)).sum()
    one_block = fit_rasch(X, "jml")
    monkeypatch.setattr(responses, "BLOCK_CELLS", 37)
    many = fit_rasch(responses.Responses.from_dense(X), "jml")
    assert len(list(responses.Responses.from_dense(X).blocks())) > 5
    for name in ("theta", "se_theta", "b", "se_b", "infit_item", "outfit_person"):
        assert np.allclose(getattr(many, name), getattr(one_block, name), rtol=1e-12, atol=1e-12, equal_nan=True)
    (rn, rs), (cn, cs) = responses.sum_cells(
        responses.Responses.from_dense(X), lambda blk: [np.ones(blk.x.size), blk.x.astype(float)], "both")
    assert np.array_equal(rn, (~np.isnan(X)).sum(axis=1)) and np.array_equal(cs, np.nansum(X, axis=0))


def _write_matrix_csv(path, X, ids, items, cell=lambda v: str(int(v))):
    lines = ["examinee," + ",".join(items)]
    for eid, row in zip(ids, X):
        lines.append(eid + "," + ",".join("" if np.isnan(v) else cell(v) for v in row))
    path.write_text("\n".join(lines) + "\n")


def test_read_csv_plain_and_irregular_chunks(tmp_path, monkeypatch):
    """Chunks of a few lines: plain ones are tokenised with numpy, others (a quoted id, '1.0'
    cells, a blank line, CRLF) go through the csv module; all give the matrix written."""
    from selfknow import response_io

    X = _missing_matrix(43, n=30, L=7)
    ids = [f"m{i}" for i in range(30)]
    ids[28] = '"model, v2"'             # quoted: a comma inside the id (the rest goes to csv)
    items = [f"q{j}" for j in range(7)]
    path = tmp_path / "m.csv"
    _write_matrix_csv(path, X, ids, items)
    text = path.read_text().replace("\nm20,", "\n\nm20,")          # a blank line
    lines = text.split("\n")
    lines[25] = lines[25].replace("1", "1.0").replace("m1.0", "m1")  # '1.0' cells on line 26
    lines[27] = lines[27] + "\r"                                     # one CRLF line
    path.write_text("\n".join(lines))
    monkeypatch.setattr(response_io, "CSV_CHUNK_BYTES", 64)
    tokenised, original = [], response_io._plain_lines

    def spy(*args):
        tokenised.append(original(*args))
        return tokenised[-1]

    monkeypatch.setattr(response_io, "_plain_lines", spy)
    R, got_ids, got_items = response_io.read_responses(path)
    assert got_items == items and got_ids == [eid.strip('"') for eid in ids]
    assert np.array_equal(R.to_dense(), X, equal_nan=True)
    assert any(p is None for p in tokenised) and any(p is not None for p in tokenised)


@pytest.mark.parametrize("chunk", [8, 13, 21, 34])
def test_csv_quoted_newline_across_chunk_boundaries(tmp_path, monkeypatch, chunk):
    """A quoted id holding a newline: whichever byte a chunk ends on, the field stays whole."""
    from selfknow import response_io

    path = tmp_path / "m.csv"
    path.write_text('examinee,q0,q1\nm0,1,0\nm1,,1\n"multi\nline id",0,1\nm3,1,\n')
    monkeypatch.setattr(response_io, "CSV_CHUNK_BYTES", chunk)
    R, ids, items = response_io.read_responses(path)
    assert ids == ["m0", "m1", "multi\nline id", "m3"] and items == ["q0", "q1"]
    assert np.array_equal(R.to_dense(), np.array([[1, 0], [np.nan, 1], [0, 1], [1, np.nan]]), equal_nan=True)


def test_read_parquet_and_cli_parquet_equals_csv(tmp_path):
    import pandas as pd

    from selfknow.cli import main
    from selfknow.response_io import read_responses

    X = _missing_matrix(45)
    ids, items = [f"m{i}" for i in range(X.shape[0])], [f"q{j}" for j in range(X.shape[1])]
    df = pd.DataFrame({"examinee": ids, **{it: pd.array(X[:, j], dtype="Int8") for j, it in enumerate(items)}})
    df.to_parquet(tmp_path / "m.parquet", index=False)
    R, got_ids, got_items = read_responses(tmp_path / "m.parquet")
    assert got_ids == ids and got_items == items and np.array_equal(R.to_dense(), X, equal_nan=True)
    _write_matrix_csv(tmp_path / "m.csv", X, ids, items)
    for name in ("m.csv", "m.parquet"):
        assert main(["rasch", str(tmp_path / name), str(tmp_path / name.replace(".", "_")), "--quiet"]) == 0
    for table in ("abilities.csv", "difficulties.csv"):
        a = pd.read_csv(tmp_path / "m_csv" / table)
        b = pd.read_csv(tmp_path / "m_parquet" / table)
        pd.testing.assert_frame_equal(a, b)
    fit = fit_rasch(X, "jml")
    assert np.allclose(pd.read_csv(tmp_path / "m_csv" / "difficulties.csv")["b"], fit.b)


def test_bad_files_name_the_id_or_cell(tmp_path, capsys):
    import pandas as pd

    from selfknow.cli import main

    cases = {
        "items.csv": ("examinee,q1,q2,q1\nm1,1,0,1\n", "line 1: duplicate item ids ['q1']"),
        "examinees.csv": ("examinee,q1,q2\nm1,1,0\nm2,0,1\nm1,1,1\n",
                          "line 4: duplicate examinee id 'm1' (first at line 2)"),
        "empty_id.csv": ("examinee,q1,q2\nm1,1,0\n,0,1\n", "line 3: empty examinee id"),
        "value.csv": ("examinee,q1,q2\nm1,1,0\nm2,2,1\n", "line 3 (examinee 'm2'), column 'q1': '2' is not 0, 1 or blank"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        assert main(["rasch", str(tmp_path / name), str(tmp_path / "out")]) == 2
        assert f"{name}: {message}" in capsys.readouterr().err
    pd.DataFrame({"examinee": ["a", "b", "a"], "q1": [1.0, 0.0, 1.0], "q2": [0.0, 1.0, None]}).to_parquet(
        tmp_path / "dup.parquet", index=False)
    assert main(["rasch", str(tmp_path / "dup.parquet"), str(tmp_path / "out")]) == 2
    assert "dup.parquet: row 3: duplicate examinee id 'a' (first at row 1)" in capsys.readouterr().err
    pd.DataFrame({"examinee": ["a", "b"], "q1": [1.0, 0.5], "q2": [0.0, 1.0]}).to_parquet(
        tmp_path / "half.parquet", index=False)
    assert main(["rasch", str(tmp_path / "half.parquet"), str(tmp_path / "out")]) == 2
    assert "half.parquet: row 2 (examinee 'b'), column 'q1': 0.5 is not 0, 1 or null" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_rasch_reports_progress(tmp_path, capsys):
    from selfknow.cli import main

    X = _missing_matrix(47)
    _write_matrix_csv(tmp_path / "m.csv", X, [f"m{i}" for i in range(40)], [f"q{j}" for j in range(12)])
    assert main(["rasch", str(tmp_path / "m.csv"), str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    fit = fit_rasch(X, "jml")
    assert [line.split("] ", 1)[1] for line in err[:2]] == [
        "read 40 examinees x 12 items",
        f"extremes: {len(fit.extreme_rows)} rows and {len(fit.extreme_cols)} columns set aside"]
    sweeps = [line for line in err if "JML sweep" in line]
    assert len(sweeps) == fit.n_iter and "abilities (wle) of 40 rows" in err[-2] and "fit statistics" in err[-1]
    assert main(["rasch", str(tmp_path / "m.csv"), str(tmp_path / "out"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
