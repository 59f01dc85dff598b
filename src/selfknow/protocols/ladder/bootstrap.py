"""LADDER uncertainty (SPEC §2 "Uncertainty"; paper §D.2, §D.5).

- `session_bootstrap`: resample a model's sessions with replacement (2,000 draws) and
  recompute the session mean of a metric; the same draws are shared by every estimator of
  the model, so differences between estimators are paired.
- `paired_cluster_bootstrap`: resample question clusters (all records of one `item_id`)
  with replacement (400 draws), refit both estimators on the resampled pooled records and
  score them against the resample's pooled domain accuracies (matched pooled comparison).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .aggregate import _ordered, with_decoded_labels
from .estimators import Stream, fit_estimator, resolve
from .metrics import answer_metrics, profile_metrics
from .records import validate_turns

PROFILE_KEYS = {"CBF", "CBF_L0", "norm_CBF", "bias", "shape_error", "kendall_tau"}


def _summary(point: float, draws: np.ndarray, level: float) -> dict[str, float]:
    d = draws[np.isfinite(draws)]
    a = (1 - level) / 2
    return {"estimate": float(point), "se": float(d.std(ddof=1)) if d.size > 1 else float("nan"),
            "ci_low": float(np.quantile(d, a)) if d.size else float("nan"),
            "ci_high": float(np.quantile(d, 1 - a)) if d.size else float("nan"),
            "n_boot": float(d.size)}


def session_bootstrap(per_session: pd.DataFrame, metric: str = "CBF", n_boot: int = 2000,
                      seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Session-bootstrap SE and percentile CI of the session mean of `metric`, per (model,
    estimator). `per_session` is `score_sessions` output. One draw matrix per model, shared
    by its estimators."""
    rng = np.random.default_rng(seed)
    rows = []
    for model, g in per_session.groupby("model", sort=False):
        wide = g.pivot(index="session_id", columns="estimator", values=metric)
        n = len(wide)
        idx = rng.integers(0, n, size=(n_boot, n))
        vals = wide.to_numpy(float)
        for j, est in enumerate(wide.columns):
            v = vals[:, j]
            draws = np.nanmean(v[idx], axis=1)
            rows.append({"model": model, "estimator": est, "metric": metric,
                         **_summary(np.nanmean(v), draws, level)})
    return pd.DataFrame(rows)


def _pooled_metric(stream: Stream, est: str, metric: str) -> float:
    out = fit_estimator(est, stream, query=metric not in PROFILE_KEYS)
    if metric in PROFILE_KEYS:
        return profile_metrics(out.profile, stream.domain, stream.correct)[metric]
    return answer_metrics(out.query_confidence, stream.correct)[metric]


def paired_cluster_bootstrap(turns: pd.DataFrame, estimator_a: str, estimator_b: str,
                             metric: str = "CBF", n_boot: int = 400, seed: int = 0,
                             rules: str = "frozen", level: float = 0.95) -> pd.DataFrame:
    """Matched pooled comparison of two estimators on each model's records: the difference
    metric(A) − metric(B), with both refitted on every question-cluster resample.

    Resampled clusters keep their records' original order (session, turn); a cluster drawn
    twice contributes its records twice. Returns one row per model with the point
    difference, bootstrap SE, percentile CI and the two point values."""
    validate_turns(turns)
    if "item_id" not in turns:
        raise ValueError("turns: the question-cluster bootstrap needs an item_id column")
    a, b = resolve(estimator_a), resolve(estimator_b)
    df = _ordered(with_decoded_labels(turns, rules))
    rng = np.random.default_rng(seed)
    rows = []
    for model, g in df.groupby("model", sort=False):
        s = Stream.from_frame(g)
        items, inv = np.unique(g["item_id"].astype(str).to_numpy(), return_inverse=True)
        members = np.argsort(inv, kind="stable")
        starts = np.searchsorted(inv[members], np.arange(items.size))
        ends = np.append(starts[1:], members.size)
        va, vb = _pooled_metric(s, a, metric), _pooled_metric(s, b, metric)
        diffs = np.empty(n_boot)
        for k in range(n_boot):
            pick = rng.integers(0, items.size, size=items.size)
            idx = np.concatenate([members[starts[i]:ends[i]] for i in pick])
            idx = idx[np.argsort(idx, kind="stable")]
            sub = s.take(idx)
            diffs[k] = _pooled_metric(sub, a, metric) - _pooled_metric(sub, b, metric)
        rows.append({"model": model, "estimator_a": a, "estimator_b": b, "metric": metric,
                     "value_a": va, "value_b": vb, **_summary(va - vb, diffs, level)})
    return pd.DataFrame(rows)
