"""LCAE, cost efficiency and the condition tests (lcae Stage 3 + statistics, SPEC §3)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import entr, rel_entr

from selfknow.stats.hypothesis import friedman, mean_ci, pairwise_wilcoxon_holm
from selfknow.stats.lcae import cost_efficiency, cost_efficiency_from_usage, lcae, run_cost_usd


# ----------------------------------------------------------------------------- LCAE

def test_lcae_hand_computed():
    e = np.array([0.2, 0.7])
    c = np.array([0.1, 0.9])
    want = -((0.2 * np.log(0.1) + 0.8 * np.log(0.9)) + (0.7 * np.log(0.9) + 0.3 * np.log(0.1))) / 2
    assert float(lcae(e, c)) == pytest.approx(want, rel=1e-12)


def test_lcae_is_entropy_plus_kl():
    """Cross-entropy = H(e) + KL(e ‖ ĉ), via scipy's entr/rel_entr (no clipping in range)."""
    rng = np.random.default_rng(0)
    e = rng.uniform(0.01, 0.99, (4, 30))
    c = rng.uniform(0.01, 0.99, (4, 30))
    ref = (entr(e) + entr(1 - e) + rel_entr(e, c) + rel_entr(1 - e, 1 - c)).mean(axis=1)
    assert np.allclose(lcae(e, c), ref, rtol=1e-12)
    assert lcae(e, c).shape == (4,)


def test_lcae_clipping_and_missing():
    eps = 1e-6
    # ĉ = 0 on an item with latent error 0.5: clipped to ε
    got = float(lcae([0.5], [0.0], eps=eps))
    assert got == pytest.approx(-(0.5 * np.log(eps) + 0.5 * np.log1p(-eps)))
    assert np.isfinite(float(lcae([0.3, 0.9], [1.0, 0.0])))
    # NaN self-assessment: the item is skipped
    assert float(lcae([0.2, 0.7], [0.1, np.nan])) == pytest.approx(float(lcae([0.2], [0.1])))
    assert np.isnan(lcae([[0.2]], [[np.nan]])[0])
    with pytest.raises(ValueError, match=r"c_hat\[1\]"):
        lcae([0.2, 0.3], [0.5, 1.5])
    with pytest.raises(ValueError, match="kind"):
        lcae([0.2], [0.1], kind="kl")


def test_lcae_squared_variant():
    e, c = np.array([[0.2, 0.7], [0.5, 0.5]]), np.array([[0.1, 0.9], [0.0, 1.0]])
    assert np.allclose(lcae(e, c, kind="squared"), [(0.01 + 0.04) / 2, 0.25])


def test_lcae_minimised_by_truthful_self_assessment():
    """For fixed e the BCE is minimised at ĉ = e: a model that reports the latent error
    probability scores lowest."""
    e = np.array([0.1, 0.4, 0.8])
    base = float(lcae(e, e))
    for c in ([0.2, 0.4, 0.8], [0.1, 0.5, 0.8], [0.0, 0.0, 1.0]):
        assert float(lcae(e, c)) > base


# ----------------------------------------------------------------------------- cost

def test_cost_efficiency_gpt_oss_120b():
    """$0.039 in, $0.19 out per million tokens: mean price $0.1145 per 10^6 tokens, so
    10^6 / 0.1145 = 8.733e6 tokens per USD, the paper's 8.73M."""
    ce = cost_efficiency(0.039, 0.19)
    assert ce == pytest.approx(8.7336e6, rel=1e-4)
    assert round(ce / 1e6, 2) == 8.73
    with pytest.raises(ValueError):
        cost_efficiency(0.0, 0.0)


def test_cost_from_usage():
    # 2M in, 1M out at $1 / $3 per M: $5 for 3M tokens
    assert float(run_cost_usd(2e6, 1e6, 1.0, 3.0)) == pytest.approx(5.0)
    assert cost_efficiency_from_usage([1e6, 1e6], [1e6], 1.0, 3.0) == pytest.approx(3e6 / 5.0)
    # equal in/out usage reproduces the simplified formula
    assert cost_efficiency_from_usage(5000, 5000, 0.039, 0.19) == pytest.approx(cost_efficiency(0.039, 0.19))


# ----------------------------------------------------------------------------- tests

def test_friedman_hand_formula():
    """No ties: χ² = 12/(n k (k+1)) Σ R_j² − 3 n (k+1)."""
    rng = np.random.default_rng(1)
    T = rng.normal(size=(12, 4)) + np.array([0.0, 0.3, 0.6, 0.9])
    R = stats.rankdata(T, axis=1).sum(axis=0)
    n, k = T.shape
    chi2 = 12.0 / (n * k * (k + 1)) * (R ** 2).sum() - 3 * n * (k + 1)
    res = friedman(T)
    assert res.statistic == pytest.approx(chi2)
    assert res.pvalue == pytest.approx(stats.chi2.sf(chi2, k - 1))
    assert (res.df, res.n_blocks) == (3, 12)
    T[0, 1] = np.nan  # an incomplete block is dropped
    assert friedman(T).n_blocks == 11


def test_wilcoxon_exact_hand_case_and_holm():
    """5 blocks, all differences positive and distinct: exact two-sided p = 2/2^5 = 0.0625."""
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    T = np.column_stack([a + np.array([0.1, 0.2, 0.3, 0.4, 0.5]), a, a])
    res = pairwise_wilcoxon_holm(T, labels=["x", "y", "z"])
    by = {(r["a"], r["b"]): r for r in res}
    assert by[("x", "y")]["p"] == pytest.approx(0.0625)
    assert by[("y", "z")]["p"] == 1.0  # identical conditions
    # Holm, by hand: sorted p, multiply by (m − rank + 1), running max, cap at 1
    p = np.array([r["p"] for r in res])
    order = np.argsort(p)
    adj = np.minimum(1.0, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    want = np.empty_like(adj)
    want[order] = adj
    assert np.allclose([r["p_holm"] for r in res], want)
    assert [r["reject"] for r in res] == list(want <= 0.05)


def test_pairwise_holm_on_random_table():
    rng = np.random.default_rng(2)
    T = rng.normal(size=(20, 4)) + np.array([0.0, 0.0, 1.0, 1.5])
    res = pairwise_wilcoxon_holm(T, labels=["baseline", "dpr", "ids", "ids+dpr"])
    assert len(res) == 6
    for r in res:
        i, j = ["baseline", "dpr", "ids", "ids+dpr"].index(r["a"]), ["baseline", "dpr", "ids", "ids+dpr"].index(r["b"])
        assert r["p"] == pytest.approx(stats.wilcoxon(T[:, i], T[:, j]).pvalue)
        assert r["p_holm"] >= r["p"]
    by = {(r["a"], r["b"]): r for r in res}
    assert by[("baseline", "ids+dpr")]["reject"] and not by[("baseline", "dpr")]["reject"]


def test_mean_ci_t_interval():
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    half = stats.t.ppf(0.975, 2) * 1.0 / np.sqrt(3)
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert half == pytest.approx(2.4841, abs=1e-4)  # t_{0.975,2} = 4.3027
    rng = np.random.default_rng(3)
    A = rng.normal(size=(5, 3))
    m, lo, hi = mean_ci(A, level=0.9)
    for row, a, b in zip(A, lo, hi):
        ref = stats.t.interval(0.9, 2, loc=row.mean(), scale=stats.sem(row))
        assert (a, b) == pytest.approx(ref)
    m, lo, hi = mean_ci([[4.0, np.nan, np.nan]])
    assert m[0] == 4.0 and np.isnan(lo[0]) and np.isnan(hi[0])
