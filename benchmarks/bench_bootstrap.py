"""Benchmark: the §A.8 bootstrap for one table cell, vectorised vs a per-replicate loop.

One cell of Tables 11-13 = one method on one (model, dataset): ten metrics (contrast Δ0b, Δ0,
Δb, Δ, AUC, BS, ECE and full AUC, BS, ECE) over B = 10^4 replicates, here with 5,000
questions and 4 evaluation checkpoints (6 contrast pairs). The loop does what a direct
implementation would: per replicate, walk its question sequence per component (numpy), then
score with the scalar functions (``classification.auc``/``brier`` and ``relplot.smECE``, the
reference SmoothECE). Both read the same per-replicate random streams, so the benchmark also
checks that the loop and the vectorised code give the same numbers. The loop is timed on
fewer replicates (half before, half after the vectorised run, since the machine is shared)
and scaled linearly; its cost varies from replicate to replicate by +-20 % (relplot's grid
follows the selected bandwidth), hence 60 of them; both run single-threaded in this
process, and both wall time and process CPU time are reported.

    python benchmarks/bench_bootstrap.py [--n-boot 10000] [--n-loop 60]
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import relplot  # noqa: E402

from selfknow.stats.classification import auc, brier  # noqa: E402
from selfknow.stats.persistent.bootstrap import (bootstrap_persistent, component_classes,  # noqa: E402
                                                 default_block, draw_block, replicate_rngs)
from selfknow.stats.persistent.contrast import METRICS, contrast_pairs, pair_data  # noqa: E402


def simulate(n_items: int, n_ckpt: int, seed: int):
    """Correctness that improves over checkpoints, confidences informative but noisy."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(0.3, 1.2, n_items)
    drift = rng.normal(0, 0.8, (n_ckpt, n_items)).cumsum(axis=0) * 0.5
    logit = skill + drift + 0.12 * np.arange(n_ckpt)[:, None]
    correct = (rng.uniform(size=logit.shape) < 1 / (1 + np.exp(-logit))).astype(float)
    conf = 1 / (1 + np.exp(-(0.8 * logit + rng.normal(0, 0.7, logit.shape))))
    return conf, correct


def loop_replicate(rng, conf, correct, pairs, classes, quotas, block):
    """One replicate, computed directly."""
    n = classes.shape[1]
    seq = draw_block(rng, n, block)
    while True:  # extend the sequence until every quota can be filled
        ok = all((classes[j][seq] == c).sum() >= quotas[j, c]
                 for j in range(classes.shape[0]) for c in (0, 1))
        if ok:
            break
        seq = np.concatenate([seq, draw_block(rng, n, block)])
    picks = []
    for j in range(classes.shape[0]):
        cls = classes[j][seq]
        rows = [seq[np.flatnonzero(cls == c)[: quotas[j, c]]] for c in (0, 1)]
        picks.append(np.concatenate(rows))
    k = correct.shape[0]
    out = {}
    fc = np.concatenate([conf[i, picks[i]] for i in range(k)])
    fy = np.concatenate([correct[i, picks[i]] for i in range(k)])
    out["full_auc"], out["full_brier"] = auc(fc, fy), brier(fc, fy)
    out["full_ece"] = np.mean([relplot.smECE(conf[i, picks[i]], correct[i, picks[i]]) for i in range(k)])
    per_pair = {m: [] for m in METRICS[:7]}
    for j, p in enumerate(pairs):
        d = pair_data(conf, p, "eq1")
        pos = np.searchsorted(p.items, picks[k + j])
        s, g, imp = d.sign[pos], d.gap[pos], d.improvement[pos]
        per_pair["delta0"].append(s.mean())
        per_pair["delta"].append(g.mean())
        per_pair["delta0_b"].append((s[imp].mean() + s[~imp].mean()) / 2)
        per_pair["delta_b"].append((g[imp].mean() + g[~imp].mean()) / 2)
        q = np.concatenate([d.q_early[pos], d.q_late[pos]])
        y = np.concatenate([d.y_early[pos], 1 - d.y_early[pos]])
        per_pair["contrast_auc"].append(auc(q, y))
        per_pair["contrast_brier"].append(brier(q, y))
        per_pair["contrast_ece"].append(relplot.smECE(d.q_early[pos], d.y_early[pos]))
    out.update({m: float(np.mean(v)) for m, v in per_pair.items()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-boot", type=int, default=10_000)
    ap.add_argument("--n-loop", type=int, default=60)
    ap.add_argument("--n-items", type=int, default=5_000)
    ap.add_argument("--n-ckpt", type=int, default=4)
    ap.add_argument("--min-contrast", type=int, default=300)
    args = ap.parse_args()

    conf, correct = simulate(args.n_items, args.n_ckpt, seed=0)
    pairs = contrast_pairs(correct, min_size=args.min_contrast)
    print(f"{args.n_items} questions, {args.n_ckpt} checkpoints, {len(pairs)} contrast pairs "
          f"(sizes {[p.size for p in pairs]}), 10 metrics, seed 17")

    classes = component_classes(correct, pairs)
    quotas = np.stack([(classes == 0).sum(1), (classes == 1).sum(1)], axis=1)
    block = default_block(classes)
    rngs = replicate_rngs(17, args.n_boot)

    def run_loop(replicates):
        w0, c0 = time.perf_counter(), time.process_time()
        res = [loop_replicate(rngs[r], conf, correct, pairs, classes, quotas, block) for r in replicates]
        return res, time.perf_counter() - w0, time.process_time() - c0

    # The machine is shared: time the loop before and after the vectorised run and average,
    # and report process CPU time next to wall time.
    half = max(1, args.n_loop // 2)
    loop_a, wall_a, cpu_a = run_loop(range(half))
    w0, c0 = time.perf_counter(), time.process_time()
    vec = bootstrap_persistent({"m": conf}, correct, pairs, n_boot=args.n_boot, seed=17)["m"]
    wall_vec, cpu_vec = time.perf_counter() - w0, time.process_time() - c0
    loop_b, wall_b, cpu_b = run_loop(range(half, args.n_loop))
    loop = loop_a + loop_b
    n_loop = len(loop)
    print(f"vectorised: {args.n_boot} replicates: wall {wall_vec:.1f} s, CPU {cpu_vec:.1f} s "
          f"({1e3 * cpu_vec / args.n_boot:.2f} ms CPU/replicate)")
    wall_rep, cpu_rep = (wall_a + wall_b) / n_loop, (cpu_a + cpu_b) / n_loop
    print(f"loop: {n_loop} replicates timed ({half} before, {n_loop - half} after the vectorised run): "
          f"{1e3 * wall_rep:.1f} ms wall, {1e3 * cpu_rep:.1f} ms CPU per replicate; scaled linearly "
          f"to {args.n_boot} replicates: wall {wall_rep * args.n_boot:.0f} s, CPU {cpu_rep * args.n_boot:.0f} s")
    worst = max(abs(loop[r][m] - vec[m][r]) for r in range(n_loop) for m in METRICS)
    print(f"max |loop - vectorised| over the {n_loop} shared replicates and 10 metrics: {worst:.2e}")
    print(f"speed-up (loop scaled / vectorised): CPU {cpu_rep * args.n_boot / cpu_vec:.1f}x, "
          f"wall {wall_rep * args.n_boot / wall_vec:.1f}x")


if __name__ == "__main__":
    main()
