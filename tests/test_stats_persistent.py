"""Golden tests for the persistent-calibration statistics (paper §2, §A.1-§A.3, §A.8, §B.1)."""
from __future__ import annotations

import numpy as np
import pytest
import relplot
import torch
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import brier_score_loss, roc_auc_score

from selfknow.stats.classification import auc, brier, logistic_fit
from selfknow.stats.isotonic import fit_isotonic
from selfknow.stats.persistent.bootstrap import (bootstrap_persistent, component_classes, default_block,
                                                 draw_block, replicate_counts, replicate_rngs,
                                                 select_from_sequence)
from selfknow.stats.persistent.bt_normalise import fit_bt_normaliser
from selfknow.stats.persistent.contrast import (METRICS, Normalisation, contrast_pairs, delta_metrics, eq1_normalise,
                                                persistent_metrics, pivot_long)
from selfknow.stats.persistent.significance import significance_marks, table_marks
from selfknow.stats.smooth_ece import smooth_ece, smooth_ece_batch, smooth_ece_sigma, smooth_ece_width


# ---------------------------------------------------------------- AUC / Brier vs scikit-learn

@pytest.mark.parametrize("case", range(6))
def test_auc_brier_match_sklearn(case):
    rng = np.random.default_rng(case)
    n = [2, 7, 50, 400, 1000, 3000][case]
    p = rng.uniform(size=n)
    if case % 2:  # heavy ties
        p = np.round(p, 1)
    y = (rng.uniform(size=n) < p).astype(float)
    y[0], y[1] = 0, 1
    assert abs(auc(p, y) - roc_auc_score(y, p)) < 1e-12
    assert abs(brier(p, y) - brier_score_loss(y, p)) < 1e-12


@pytest.mark.parametrize("case", range(5))
def test_logistic_fit_matches_sklearn_and_recovers_a_planted_map(case):
    """The one-feature L2 logistic fit (LCAE's calibration map) equals scikit-learn's
    LogisticRegression(C) at its optimum, on small and separable-leaning samples too; on a
    large sample it recovers the planted slope and intercept."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(case)
    n, C = [6, 40, 300, 2000, 20000][case], [1.0, 0.1, 1.0, 10.0, 1.0][case]
    x = rng.normal(0, 2, n)
    y = rng.random(n) < 1 / (1 + np.exp(-(1.5 * x - 0.7)))
    y[0], y[1] = False, True
    got = logistic_fit(x, y, C=C)
    ref = LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(x[:, None], y)
    assert got == pytest.approx((ref.coef_[0, 0], ref.intercept_[0]), abs=1e-6)
    if n == 20000:
        assert got == pytest.approx((1.5, -0.7), abs=0.06)
    with pytest.raises(ValueError, match="all one class"):
        logistic_fit(x, np.ones(n))


# ---------------------------------------------------------------- SmoothECE vs relplot

def _smece_cases():
    rng = np.random.default_rng(7)
    cases = []
    for n in (1, 2, 3, 4, 5):
        f = rng.uniform(size=n)
        cases.append((f, (rng.uniform(size=n) < f).astype(float)))
    cases.append((np.full(10, 0.7), np.ones(10)))  # constant confidence, all correct
    cases.append((np.full(10, 0.7), np.zeros(10)))  # all wrong
    cases.append((np.array([0.0, 1.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0])))  # exact 0/1
    cases.append((np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0])))  # perfect
    cases.append((np.round(rng.uniform(size=300), 1), rng.integers(0, 2, 300).astype(float)))  # ties
    cases.append((np.ones(50), rng.integers(0, 2, 50).astype(float)))
    cases.append((np.zeros(50), rng.integers(0, 2, 50).astype(float)))
    for n in (20, 200, 1000, 5000, 20000):  # calibrated, over- and under-confident
        f = rng.uniform(size=n) ** rng.uniform(0.3, 3)
        y = (rng.uniform(size=n) < np.clip(f + rng.normal(0, 0.15), 0, 1)).astype(float)
        cases.append((f, y))
    f = rng.uniform(size=4000)
    cases.append((f, (rng.uniform(size=4000) < f).astype(float)))  # well calibrated: small sigma
    cases.append((f, (rng.uniform(size=4000) < f ** 3).astype(float)))
    cases.append((np.array([1.0]), np.array([1.0])))  # n = 1 at the boundary
    cases.append((np.array([0.0]), np.array([1.0])))
    g = rng.uniform(size=30000)  # large and calibrated: sigma* below 0.01, larger grids
    cases.append((g, (rng.uniform(size=30000) < g).astype(float)))
    return cases


@pytest.mark.parametrize("case", range(22))
def test_smooth_ece_matches_relplot(case):
    f, y = _smece_cases()[case]
    ref, ref_sigma = relplot.smECE(f, y, return_width=True)
    ours, sigma = smooth_ece_width(f, y)
    assert sigma == ref_sigma
    assert abs(ours - ref) < 1e-6
    assert abs(smooth_ece(f, y) - ref) < 1e-6


def test_smooth_ece_fixed_sigma_and_small_sigma_fft_path():
    rng = np.random.default_rng(3)
    f = rng.uniform(size=500)
    y = (rng.uniform(size=500) < f).astype(float)
    for sigma in (0.5, 0.1, 0.03, 0.002):  # 0.002 uses the FFT route
        assert abs(smooth_ece_sigma(f, y, sigma) - relplot.smECE_sigma(f, y, sigma)) < 1e-9


def test_smooth_ece_batch_counts_equal_repeated_samples():
    rng = np.random.default_rng(4)
    n = 300
    f = rng.uniform(size=n)
    y = (rng.uniform(size=n) < f ** 1.5).astype(float)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(6)])
    vals = smooth_ece_batch(f, y, counts)
    for b in range(6):
        ref = relplot.smECE(np.repeat(f, counts[b]), np.repeat(y, counts[b]))
        assert abs(vals[b] - ref) < 1e-9


def test_smooth_ece_batch_on_many_rows_equals_relplot():
    """Enough rows for the dense operator, the cosine screen and its precise variant: every
    row's bandwidth is relplot's exactly, its value to 1e-9. The three data sets select wide
    (truncated-kernel) and narrow (exponentially converging) bandwidths."""
    rng = np.random.default_rng(12)
    for n, power in ((400, 2.5), (1500, 1.0), (3000, 1.0)):
        f = rng.uniform(size=n)
        y = (rng.uniform(size=n) < f ** power).astype(float)
        counts = rng.multinomial(n, np.full(n, 1 / n), size=24)
        vals, sigmas = smooth_ece_batch(f, y, counts, return_sigma=True)
        for b in range(24):
            ref, ref_sigma = relplot.smECE(np.repeat(f, counts[b]), np.repeat(y, counts[b]), return_width=True)
            assert sigmas[b] == ref_sigma
            assert abs(vals[b] - ref) < 1e-9


@pytest.mark.parametrize("n", [400, 3000])
def test_smooth_ece_fast_path_equals_relplot(n, monkeypatch):
    """Enough rows for the fast path (the cached dense operator), for data sets smaller and
    larger than the E = 1001-point grid (the product's two associations): every row's
    bandwidth is relplot's exactly, its value within 1e-9."""
    from selfknow.stats import smooth_ece as se

    monkeypatch.setattr(se, "_OPERATORS", se.OrderedDict())
    rng = np.random.default_rng(n)
    f = rng.uniform(size=n)
    y = (rng.uniform(size=n) < f ** 1.5).astype(float)
    rows = se._MIN_ROWS_FOR_OPERATOR + 2
    counts = rng.multinomial(n, np.full(n, 1 / n), size=rows)
    vals, sigmas = smooth_ece_batch(f, y, counts, return_sigma=True)
    assert 0.5 in se._OPERATORS  # the first bisection step took the fast path
    for b in range(rows):
        ref, ref_sigma = relplot.smECE(np.repeat(f, counts[b]), np.repeat(y, counts[b]), return_width=True)
        assert sigmas[b] == ref_sigma
        assert abs(vals[b] - ref) < 1e-9


def test_smooth_ece_does_not_depend_on_what_the_process_computed_before(monkeypatch):
    """A few rows take the reference path even at a bandwidth whose operator an earlier, larger
    batch cached: the value is bit for bit the one a fresh process computes (the two paths
    differ in the last bits, so a cache-dependent choice made the workflow's metrics depend on
    the order its methods ran in)."""
    from selfknow.stats import smooth_ece as se

    rng = np.random.default_rng(8)  # a case where the two paths differ (by 6e-17)
    f = rng.uniform(size=500)
    y = (rng.uniform(size=500) < f ** 1.5).astype(float)
    few = rng.multinomial(500, np.full(500, 1 / 500), size=3)
    monkeypatch.setattr(se, "_OPERATORS", se.OrderedDict())
    fresh = smooth_ece_batch(f, y, few)
    smooth_ece_batch(f, y, rng.multinomial(500, np.full(500, 1 / 500), size=40))
    assert 0.5 in se._OPERATORS
    assert np.array_equal(smooth_ece_batch(f, y, few), fresh)


@pytest.mark.parametrize("n", [300, 2500])
@pytest.mark.parametrize("sigma", [1.0, 0.5, 0.125, 0.04, 0.012])
def test_smooth_ece_fast_path_equals_reference_path(n, sigma):
    """The dense operator (either association of the product) and relplot's FFT steps give
    smECE_sigma equal to float64 rounding."""
    from selfknow.stats import smooth_ece as se

    rng = np.random.default_rng(int(sigma * 1000) + n)
    f = rng.uniform(size=n) ** 1.4
    y = (rng.uniform(size=n) < f).astype(float)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=6).astype(float)
    part = se._Part(f, y, counts)
    rows = np.arange(6)
    np.testing.assert_allclose(part.fast(sigma, rows, se._Operator(sigma)), part.reference(sigma, rows),
                               rtol=1e-12, atol=0)


def test_smooth_ece_rejects_bad_input():
    with pytest.raises(ValueError, match="row 1"):
        smooth_ece([0.2, 1.5], [0, 1])
    with pytest.raises(ValueError, match="0/1"):
        smooth_ece([0.2, 0.5], [0, 2])


# ---------------------------------------------------------------- Eq. 1 and the Δ metrics

def test_eq1_hand_values():
    q1, q2 = eq1_normalise([0.8, 0.6, 0.5, 0.0, 1.0, 0.0], [0.4, 0.3, 0.5, 0.0, 1.0, 1.0])
    # 0.8, 0.4: 0.8*0.6 = 0.48, 0.4*0.2 = 0.08, Z = 0.56 -> 6/7, 1/7
    # 0.6, 0.3: 0.42, 0.12, Z = 0.54 -> 7/9, 2/9;  0.5, 0.5 -> 1/2, 1/2
    # both 0 / both 1: Z = 0 -> 1/2, 1/2;  0 vs 1: Z = 1 -> 0, 1
    np.testing.assert_allclose(q1, [6 / 7, 7 / 9, 0.5, 0.5, 0.5, 0.0], atol=1e-15)
    np.testing.assert_allclose(q1 + q2, 1.0, atol=1e-15)


def _toy():
    # rows: earlier, later checkpoint; contrast items 0 (regression), 1, 2 (improvements)
    correct = np.array([[1, 0, 0, 1, 0], [0, 1, 1, 1, 0]], dtype=float)
    conf = np.array([[0.8, 0.5, 0.6, 0.9, 0.2], [0.4, 0.5, 0.3, 0.7, 0.1]])
    return conf, correct


def test_contrast_pairs_and_delta_hand_values():
    conf, correct = _toy()
    pairs = contrast_pairs(correct)
    assert len(pairs) == 1 and pairs[0].items.tolist() == [0, 1, 2]
    assert pairs[0].improvement.tolist() == [False, True, True]
    assert contrast_pairs(correct, min_size=4) == []
    m = persistent_metrics(conf, correct)
    # normalised: item0 (6/7, 1/7) gap 5/7 sign +1; item1 (1/2, 1/2) gap 0 sign 0;
    # item2 (7/9, 2/9), later correct: gap 2/9 - 7/9 = -5/9, sign -1
    assert m["delta"] == pytest.approx((5 / 7 + 0 - 5 / 9) / 3, abs=1e-12)  # 10/189
    assert m["delta0"] == pytest.approx(0.0, abs=1e-12)
    # balanced: regression mean 5/7, improvement mean (0 - 5/9)/2 = -5/18 -> 55/252
    assert m["delta_b"] == pytest.approx(0.5 * (5 / 7 - 5 / 18), abs=1e-12)
    assert m["delta0_b"] == pytest.approx(0.5 * (1 + (0 - 1) / 2), abs=1e-12)  # 1/4
    # pooled AUC: positives 6/7, 1/2, 2/9 vs negatives 1/7, 1/2, 7/9 -> (3 + 1.5 + 1) / 9
    assert m["contrast_auc"] == pytest.approx(5.5 / 9, abs=1e-12)
    # Brier: both endpoints give (1/7)^2 + 1/4 + (7/9)^2 over 3 questions
    assert m["contrast_brier"] == pytest.approx(((1 / 7) ** 2 + 0.25 + (7 / 9) ** 2) / 3, abs=1e-12)
    # ECE on the earlier checkpoint's normalised confidences (labels 1, 0, 0)
    ref = relplot.smECE(np.array([6 / 7, 0.5, 7 / 9]), np.array([1.0, 0, 0]))
    assert m["contrast_ece"] == pytest.approx(ref, abs=1e-9)
    later = relplot.smECE(np.array([1 / 7, 0.5, 2 / 9]), np.array([0.0, 1, 1]))
    assert later == pytest.approx(ref, abs=1e-9)  # footnote 3: invariant to the checkpoint
    d = delta_metrics([6 / 7, 0.5, 2 / 9], [1 / 7, 0.5, 7 / 9], [False, True, True])
    assert d["delta"] == pytest.approx(m["delta"]) and d["delta0_b"] == pytest.approx(0.25)


def test_full_metrics_pool_auc_brier_but_average_ece():
    rng = np.random.default_rng(5)
    n = 400
    correct = np.stack([rng.uniform(size=n) < 0.5, rng.uniform(size=n) < 0.7]).astype(float)
    conf = np.full((2, n), 0.6)  # §A.3 example: constant 0.6 on 50 % and 70 % accuracy
    m = persistent_metrics(conf, correct)
    per_ckpt = [relplot.smECE(conf[k], correct[k]) for k in range(2)]
    assert m["full_ece"] == pytest.approx(np.mean(per_ckpt), abs=1e-9)
    assert m["full_ece"] > relplot.smECE(conf.ravel(), correct.ravel()) + 0.05
    assert m["full_auc"] == pytest.approx(roc_auc_score(correct.ravel(), conf.ravel()), abs=1e-12)
    # constant confidence: every contrast question normalises to 1/2 / 1/2
    assert m["contrast_brier"] == pytest.approx(0.25) and m["delta"] == pytest.approx(0.0)


def test_end_correct_baseline_shape():
    # Table 11 "End-correct baseline": Δ0b = 0 exactly, Δ0 = (n_imp - n_reg) / n.
    rng = np.random.default_rng(6)
    correct = (rng.uniform(size=(4, 2000)) < np.array([0.5, 0.55, 0.6, 0.65])[:, None]).astype(float)
    conf = np.repeat(np.linspace(0, 1, 4)[:, None], 2000, axis=1)
    m = persistent_metrics(conf, correct, min_contrast=1)
    pairs = contrast_pairs(correct)
    assert m["delta0_b"] == pytest.approx(0.0, abs=1e-12)
    expect = np.mean([(p.n_improvement - p.n_regression) / p.size for p in pairs])
    assert m["delta0"] == pytest.approx(expect, abs=1e-12)


def test_seeds_are_averaged_and_pivot_long():
    conf, correct = _toy()
    two = np.stack([conf, conf[::-1] * 0 + 0.5])
    m = persistent_metrics(two, correct)
    a, b = persistent_metrics(conf, correct), persistent_metrics(two[1], correct)
    for k in METRICS:
        assert m[k] == pytest.approx((a[k] + b[k]) / 2, abs=1e-12)
    ck = np.array(["late", "early", "late", "early"])
    it = np.array([2, 2, 1, 1])
    arr, labels, items = pivot_long(ck, it, [0.1, 0.2, 0.3, 0.4], checkpoint_order=["early", "late"])
    assert labels.tolist() == ["early", "late"] and items.tolist() == [1, 2]
    np.testing.assert_allclose(arr, [[0.4, 0.2], [0.3, 0.1]])
    with pytest.raises(ValueError, match="missing row"):
        pivot_long(ck[:3], it[:3], [0.1, 0.2, 0.3], checkpoint_order=["early", "late"])


# ---------------------------------------------------------------- §B.1 fitted normalisation

def test_bt_normaliser_properties_and_fit():
    rng = np.random.default_rng(8)

    def true_h(p):  # antisymmetric, far from logit: a steep step around 0.5
        return 4 * np.tanh(8 * (p - 0.5))

    def simulate(n):
        p1, p2 = rng.uniform(size=n), rng.uniform(size=n)
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(true_h(p1) - true_h(p2))))).astype(float)
        return p1, p2, y

    p1, p2, y = simulate(4000)
    bt = fit_bt_normaliser(p1, p2, y)
    grid = np.linspace(0, 1, 101)
    np.testing.assert_allclose(bt.h(1 - grid), -bt.h(grid), atol=1e-12)
    assert bt.h(0.5) == 0
    a, b = rng.uniform(size=50), rng.uniform(size=50)
    np.testing.assert_allclose(bt.prob_first(a, b) + bt.prob_first(b, a), 1, atol=1e-12)
    q1, q2 = bt(a, b)
    np.testing.assert_allclose(q1 + q2, 1, atol=1e-12)
    assert np.all(np.diff(bt.h(grid)) >= -1e-12)  # monotone
    t1, t2, ty = simulate(4000)  # held out
    z = np.log(t1 / (1 - t1)) - np.log(t2 / (1 - t2))
    eq1_nll = float(np.mean(np.logaddexp(0, z) - ty * z))
    assert bt.nll(t1, t2, ty) < eq1_nll - 0.02
    truth = true_h(t1) - true_h(t2)
    truth_nll = float(np.mean(np.logaddexp(0, truth) - ty * truth))
    assert bt.nll(t1, t2, ty) < truth_nll + 0.02


def test_bt_recovers_eq1_when_eq1_is_true():
    rng = np.random.default_rng(9)
    p1, p2 = rng.uniform(0.02, 0.98, 6000), rng.uniform(0.02, 0.98, 6000)
    q1, _ = eq1_normalise(p1, p2)
    y = (rng.uniform(size=6000) < q1).astype(float)
    bt = fit_bt_normaliser(p1, p2, y)
    grid = np.linspace(0.55, 0.95, 9)
    np.testing.assert_allclose(bt.h(grid), np.log(grid / (1 - grid)), atol=0.35)


def _authors_condition(p1, p2):
    """Reference: the authors' `condition_pair_confidences` (conset/evaluation.py, btl_term
    "odds") re-stated in torch float32: clamp, numerators, division."""
    a = torch.tensor(p1, dtype=torch.float64).float().clamp(1e-6, 1 - 1e-6)
    b = torch.tensor(p2, dtype=torch.float64).float().clamp(1e-6, 1 - 1e-6)
    n1, n2 = a * (1 - b), (1 - a) * b
    return (n1 / (n1 + n2)).double().numpy(), (n2 / (n1 + n2)).double().numpy()


def test_eq1_with_the_authors_clamp_is_their_float32_arithmetic():
    p1 = np.array([1.0, 0.0, 0.0, 1.0, 0.3, 0.8, 1e-9, 0.999999999, 0.62])
    p2 = np.array([0.3, 0.0, 1.0, 1.0, 0.3, 0.4, 0.5, 0.5, 0.9999995])
    q1, q2 = eq1_normalise(p1, p2, clamp=1e-6)
    r1, r2 = _authors_condition(p1, p2)
    np.testing.assert_array_equal(q1, r1)
    np.testing.assert_array_equal(q2, r2)
    # hand values: 1 vs 0.3 -> (1 - 1e-6)(0.7) / ((1 - 1e-6)(0.7) + 1e-6 (0.3)) = 1 - 4.29e-7;
    # exact 0 / 1 pairs become 1e-6-scale; both 0, both 1 -> 1/2
    assert abs(q1[0] - (1 - 0.3e-6 / 0.7)) < 1e-7 and q1[0] < 1
    assert 0 < q1[2] < 2e-12 and q1[1] == q1[3] == 0.5
    exact, _ = eq1_normalise(p1, p2)
    assert exact[0] == 1.0 and exact[2] == 0.0
    np.testing.assert_allclose(q1[4:], exact[4:], atol=2e-6)


def test_the_authors_clamp_moves_contrast_auc_on_exact_zero_one_confidences():
    """Exact 0/1 confidences tie under the exact formula (every q is 0 or 1); the clamp splits
    the ties by the other checkpoint's confidence, so the pooled contrast AUC moves."""
    correct = np.array([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=float)
    conf = np.array([[1.0, 1.0, 0.7, 0.2], [0.3, 0.6, 1.0, 0.0]])
    exact = persistent_metrics(conf, correct)
    authors = persistent_metrics(conf, correct, normaliser=Normalisation("eq1", clamp=1e-6))
    q_early, q_late = _authors_condition(conf[0], conf[1])
    q = np.concatenate([q_early, q_late])
    y = np.concatenate([correct[0], correct[1]])
    assert authors["contrast_auc"] == pytest.approx(roc_auc_score(y, q), abs=1e-12)
    # exact: q_early = [1, 1, 0, 1], q_late = [0, 0, 1, 0]; positives [1, 0, 0, 0] against
    # negatives [1, 1, 0, 1]: (1 + 3 ties / 2 + 3 ties / 2) / 16 = 0.25. Clamped: the positive
    # 1 - 4.3e-7 beats all four negatives, each 1e-6-scale positive beats the 4.3e-7
    # negative only: 7 / 16
    assert exact["contrast_auc"] == pytest.approx(0.25) and authors["contrast_auc"] == pytest.approx(7 / 16)
    assert authors["delta0"] == exact["delta0"]  # Δ0 reads the raw confidences


def test_bt_at_the_authors_iterations_reaches_the_optimum_where_50_stop_short():
    """An informative contrast set (steep true h): at the paper's 50 L-BFGS-B iterations the
    fit stops unconverged, its normalised confidences 2e-2 from the optimum; at the authors'
    500 (gtol 1e-9, ftol 1e-12) it converges. Optimality is certified independently of the
    fit's design matrix: KKT conditions of the increments from finite differences of
    `BTNormaliser.nll` (zero gradient on free increments, non-negative on bounded ones)."""
    from selfknow.stats.persistent.bt_normalise import MAX_ITER, BTNormaliser

    rng = np.random.default_rng(3)
    p1, p2 = rng.uniform(size=1500), rng.uniform(size=1500)
    true_h = lambda p: 6 * np.tanh(10 * (p - 0.5))  # noqa: E731
    y = (rng.uniform(size=1500) < 1 / (1 + np.exp(-(true_h(p1) - true_h(p2))))).astype(float)

    def kkt(bt):
        inc, e = np.diff(bt.values), 1e-6
        nll = lambda x: BTNormaliser(bt.knots, np.concatenate([[0.0], np.cumsum(x)])).nll(p1, p2, y)  # noqa: E731
        g = np.array([(nll(inc + e * d) - nll(inc - e * d)) / (2 * e) for d in np.eye(inc.size)])
        free = inc > 1e-8
        return np.abs(g[free]).max(), g[~free].min() if (~free).any() else 0.0

    short, full = fit_bt_normaliser(p1, p2, y, max_iter=50), fit_bt_normaliser(p1, p2, y)
    assert MAX_ITER == 500 and full.converged and full.n_iter < MAX_ITER
    assert not short.converged and short.n_iter == 50
    free_grad, bound_grad = kkt(full)
    assert free_grad < 1e-6 and bound_grad > -1e-6
    assert kkt(short)[0] > 1e-5
    gap = np.abs(short(p1, p2)[0] - full(p1, p2)[0]).max()
    assert 1e-2 < gap < 5e-2
    assert short.nll(p1, p2, y) > full.nll(p1, p2, y) + 5e-5
    # the schema's default is the authors' number
    from selfknow.schema import defaults
    assert defaults("persistent")["bt_max_iter"] == MAX_ITER


def test_persistent_metrics_with_fitted_normaliser_keeps_delta0():
    conf, correct = _toy()
    m_eq1 = persistent_metrics(conf, correct)
    m_bt = persistent_metrics(conf, correct, normaliser="bt")
    assert m_bt["delta0"] == m_eq1["delta0"] and m_bt["delta0_b"] == m_eq1["delta0_b"]


# ---------------------------------------------------------------- isotonic (post-hoc)

@pytest.mark.parametrize("case", range(4))
def test_isotonic_matches_sklearn(case):
    rng = np.random.default_rng(10 + case)
    n = [5, 60, 500, 3000][case]
    x = rng.uniform(size=n)
    if case % 2:
        x = np.round(x, 2)
    y = (rng.uniform(size=n) < x ** 2).astype(float)
    ours = fit_isotonic(x, y)
    ref = IsotonicRegression(out_of_bounds="clip").fit(x, y)
    query = np.concatenate([rng.uniform(-0.1, 1.1, 500), x])
    np.testing.assert_allclose(ours(query), ref.predict(query), atol=1e-12)


def test_isotonic_block_means_variant_hand_case():
    # sorted y = 0, 1, 0, 1: PAV pools the middle pair -> blocks {0.1}:0, {0.3, 0.5}:0.5, {0.7}:1
    cal = fit_isotonic([0.1, 0.3, 0.5, 0.7], [0, 1, 0, 1], interpolation="block_means")
    np.testing.assert_allclose(cal.x, [0.0, 0.1, 0.4, 0.7, 1.0])
    np.testing.assert_allclose(cal.y, [0.0, 0.0, 0.5, 1.0, 1.0])


# ---------------------------------------------------------------- the §A.8 bootstrap

def test_select_from_sequence_hand_case():
    classes = np.array([[1, 1, 0, 0],  # a checkpoint: items 0, 1 correct
                        [1, 0, 1, -1]], dtype=np.int8)  # a pair: item 3 not in the contrast set
    quotas = np.array([[2, 2], [1, 2]])
    seq = np.array([[3, 2, 2, 0, 1, 0, 2]])
    acc, filled = select_from_sequence(seq, classes, quotas)
    # checkpoint: 3 (c0 #1), 2 (c0 #2), 2 (c0 #3 full), 0 (c1 #1), 1 (c1 #2) -> positions 0,1,3,4
    assert np.flatnonzero(acc[0, 0]).tolist() == [0, 1, 3, 4]
    # pair: 3 skipped, 2 (imp #1), 2 (imp #2), 0 (imp full), 1 (reg #1) -> positions 1, 2, 4
    assert np.flatnonzero(acc[1, 0]).tolist() == [1, 2, 4]
    assert filled.tolist() == [True]
    _, filled = select_from_sequence(seq[:, :4], classes, quotas)
    assert filled.tolist() == [False]


def _literal_replicate(rng, classes, quotas, block):
    """§A.8 read literally: walk the shared sequence, one question at a time."""
    n_comp, n = classes.shape
    counts = np.zeros((n_comp, n), dtype=int)
    left = quotas.copy()
    while left.sum() > 0:
        for q in draw_block(rng, n, block):
            for j in range(n_comp):
                c = classes[j, q]
                if c >= 0 and left[j, c] > 0:
                    left[j, c] -= 1
                    counts[j, q] += 1
            if left.sum() == 0:
                break
    return counts


def _small_world(seed=11, n=60, k=3):
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=n)
    correct = (rng.uniform(size=(k, n)) < 1 / (1 + np.exp(-(skill + 0.4 * np.arange(k)[:, None])))).astype(float)
    conf = 1 / (1 + np.exp(-(skill + 0.4 * np.arange(k)[:, None] + rng.normal(0, 1, (k, n)))))
    return conf, correct


def test_vectorised_replicates_equal_literal_walk_and_keep_strata():
    conf, correct = _small_world()
    pairs = contrast_pairs(correct, min_size=5)
    classes = component_classes(correct, pairs)
    quotas = np.stack([(classes == 0).sum(1), (classes == 1).sum(1)], axis=1)
    block = 20  # short blocks force the multi-block path for many replicates
    counts = np.concatenate(list(replicate_counts(classes, 40, seed=3, chunk=16, block=block)))
    other_chunks = np.concatenate(list(replicate_counts(classes, 40, seed=3, chunk=7, block=block)))
    np.testing.assert_array_equal(counts, other_chunks)  # batching does not change replicates
    rngs = replicate_rngs(3, 40)
    for r in range(40):
        np.testing.assert_array_equal(counts[r], _literal_replicate(rngs[r], classes, quotas, block))
    for j in range(classes.shape[0]):
        for c in (0, 1):
            assert np.all(counts[:, j, classes[j] == c].sum(axis=1) == quotas[j, c])
        assert np.all(counts[:, j, classes[j] == -1] == 0)
    assert default_block(classes) >= classes.shape[1]


def test_replicates_with_a_shared_head_equal_literal_walk(monkeypatch):
    """At n = 1000 the first draws (no quota can plausibly fill there) are tallied once for
    all components; replicates still equal the literal walk. Forcing the head almost to the
    block's end makes quotas fill inside it: those replicates are redone draw by draw."""
    import selfknow.stats.persistent.bootstrap as bootstrap

    conf, correct = _small_world(seed=5, n=1000, k=3)
    pairs = contrast_pairs(correct, min_size=20)
    classes = component_classes(correct, pairs)
    quotas = np.stack([(classes == 0).sum(1), (classes == 1).sum(1)], axis=1)
    block = default_block(classes)
    assert 0 < bootstrap.head_length(classes) < block
    rngs = replicate_rngs(8, 12)
    literal = [_literal_replicate(rngs[r], classes, quotas, block) for r in range(12)]
    counts = np.concatenate(list(replicate_counts(classes, 12, seed=8, chunk=5)))
    for r in range(12):
        np.testing.assert_array_equal(counts[r], literal[r])
    monkeypatch.setattr(bootstrap, "head_length", lambda classes: block - 5)
    forced = np.concatenate(list(replicate_counts(classes, 12, seed=8, chunk=5)))
    np.testing.assert_array_equal(forced, counts)


def test_packed_counts_fall_back_when_a_multiplicity_overflows_its_field():
    from selfknow.stats.persistent.bootstrap import _counts_from_accepted

    seq = np.array([[0] * 300 + [1, 2]], dtype=np.int32)  # item 0 taken 300 times (> 255)
    accepted = np.ones((2, 1, 302), dtype=bool)
    accepted[1, 0, :3] = False
    member = np.ones((2, 3), dtype=bool)
    out = _counts_from_accepted(seq, accepted, member)
    assert out[:3, 0].tolist() == [300, 1, 1]
    assert out[3:, 0].tolist() == [297, 1, 1]
    # The same draws with the first 200 as a shared head (every component takes all of them):
    # 200 from the head and 100 from the tail wrap a byte around.
    head_hist = np.array([[200.0], [0.0], [0.0]])
    out = _counts_from_accepted(seq, accepted[:, :, 200:], member, head_hist)
    assert out[:, 0].tolist() == [300, 1, 1, 300, 1, 1]


@pytest.mark.parametrize("levels", [None, 10, 3, 1])
def test_bootstrap_metrics_equal_metrics_of_the_expanded_replicate(levels):
    """Continuous confidences, and discrete ones (ties: few, mostly, all) as self-consistency
    and the end-correct baseline produce."""
    conf, correct = _small_world(n=80)
    if levels is not None:
        conf = np.round(conf * levels) / levels if levels > 1 else np.full_like(conf, 0.5)
    pairs = contrast_pairs(correct, min_size=5)
    out = bootstrap_persistent({"m": conf}, correct, pairs, n_boot=5, seed=2, chunk=2)["m"]
    counts = np.concatenate(list(replicate_counts(component_classes(correct, pairs), 5, seed=2)))
    k = correct.shape[0]
    for r in range(5):
        c = counts[r].astype(int)
        fc = np.concatenate([np.repeat(conf[i], c[i]) for i in range(k)])
        fy = np.concatenate([np.repeat(correct[i], c[i]) for i in range(k)])
        assert out["full_auc"][r] == pytest.approx(roc_auc_score(fy, fc), abs=1e-12)
        assert out["full_brier"][r] == pytest.approx(brier_score_loss(fy, fc), abs=1e-12)
        ece = np.mean([relplot.smECE(np.repeat(conf[i], c[i]), np.repeat(correct[i], c[i])) for i in range(k)])
        assert out["full_ece"][r] == pytest.approx(ece, abs=1e-9)
        per_pair = []
        for j, p in enumerate(pairs):
            rep = np.repeat(p.items, c[k + j, p.items])
            sub_conf = conf[[p.early, p.late]][:, rep]
            sub_corr = correct[[p.early, p.late]][:, rep]
            mm = persistent_metrics(sub_conf, sub_corr)
            per_pair.append(mm)
        for name in ("delta0", "delta", "contrast_auc", "contrast_brier", "contrast_ece"):
            assert out[name][r] == pytest.approx(np.mean([m[name] for m in per_pair]), abs=1e-9), name
    # the original data (all multiplicities 1) reproduce the point estimates
    point = persistent_metrics(conf, correct, pairs)
    assert np.isfinite(point["delta_b"])


def test_bootstrap_pairs_methods_and_averages_seeds():
    conf, correct = _small_world(n=120)
    pairs = contrast_pairs(correct, min_size=5)
    rng = np.random.default_rng(0)
    seeds = np.clip(conf[None] + rng.normal(0, 0.05, (3,) + conf.shape), 0, 1)
    out = bootstrap_persistent({"multi": seeds, "s0": seeds[0], "s1": seeds[1], "s2": seeds[2]},
                               correct, pairs, n_boot=8, seed=4, metrics=("full_auc", "contrast_brier"))
    for name in ("full_auc", "contrast_brier"):
        mean = (out["s0"][name] + out["s1"][name] + out["s2"][name]) / 3
        np.testing.assert_allclose(out["multi"][name], mean, atol=1e-12)
    again = bootstrap_persistent({"s0": seeds[0]}, correct, pairs, n_boot=8, seed=4, metrics=("full_auc",))
    np.testing.assert_array_equal(again["s0"]["full_auc"], out["s0"]["full_auc"])
    bt = bootstrap_persistent({"s0": seeds[0]}, correct, pairs, n_boot=4, seed=4,
                              normaliser="bt", metrics=("delta0", "delta"))
    eq1 = bootstrap_persistent({"s0": seeds[0]}, correct, pairs, n_boot=4, seed=4, metrics=("delta0",))
    np.testing.assert_allclose(bt["s0"]["delta0"], eq1["s0"]["delta0"])  # Δ0 is normaliser-free
    assert np.all(np.isfinite(bt["s0"]["delta"]))


# ---------------------------------------------------------------- significance marks

def test_significance_marks_constructed_case():
    rng = np.random.default_rng(12)
    base = rng.normal(0.8, 0.01, 10_000)
    reps = {"A": base, "B": base - 0.05 + rng.normal(0, 0.005, 10_000),  # clearly worse
            "C": base - 0.001 + rng.normal(0, 0.01, 10_000),  # within noise
            "D": base + 0.0}
    point = {"A": 0.80, "B": 0.75, "C": 0.799, "D": 0.800004, "E": float("nan")}
    marks = significance_marks(point, reps, higher_is_better=True)
    # D is the best; A, tied with it within 1e-5 and not significantly worse, is bold and
    # underlined, as in the authors' tables (conset/latex.py)
    assert marks == {"A": "best+tie", "B": "", "C": "tie", "D": "best", "E": ""}
    # lower is better: the sign flips
    low = significance_marks({"A": 0.2, "B": 0.25, "C": 0.201},
                             {"A": -base, "B": -base + 0.05 + rng.normal(0, 0.005, 10_000),
                              "C": -base + 0.001 + rng.normal(0, 0.01, 10_000)}, higher_is_better=False)
    assert low == {"A": "best", "B": "", "C": "tie"}
    # a tied best prints bold and underlined in every format, as the authors' LaTeX
    import pandas as pd
    from selfknow.report import tables as T
    df, mk = pd.DataFrame({"m": [0.8, 0.8, 0.7, 0.5]}), pd.DataFrame({"m": ["best", "best+tie", "tie", ""]})
    assert r"\underline{\textbf{0.800}}" in T.to_latex(df, marks=mk, digits=3)
    assert "| <u>**0.800**</u> |" in T.to_markdown(df, marks=mk, digits=3)
    assert "<u><strong>0.800</strong></u>" in T.to_html(df, marks=mk, digits=3)
    assert "| **0.800** |" in T.to_markdown(df, marks=mk, digits=3) and "| <u>0.700</u> |" in T.to_markdown(df, marks=mk, digits=3)
    tbl = table_marks({"A": {"full_ece": 0.2}, "B": {"full_ece": 0.25}},
                      {"A": {"full_ece": -base}, "B": {"full_ece": -base + 0.05}})
    assert tbl == {"A": {"full_ece": "best"}, "B": {"full_ece": ""}}
