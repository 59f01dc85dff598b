"""Benchmark: the workflow's own persistent metrics job (`compute_metrics`) on synthetic data
shaped like the default config's (config.yaml `persistent:`).

One job of rule `persistent_metrics` scores every method of one (model, dataset) on the main
evaluation set: 500 test questions, 4 evaluation checkpoints (accuracy rising from ~0.35 to
~0.65, so the retained contrast sets hold ~140-300 questions at min_contrast 120), 10,000
bootstrap replicates for the eight non-ECE metrics and 100 for the two SmoothECE metrics,
Eq. 1 for every method and the fitted §B.1 normaliser for five. The methods mimic the
confidences `assemble_methods` builds: the end-correct baseline (one constant per checkpoint),
self-consistency and its derivatives (tenths, from 10 beams, or a few isotonic levels), and
continuous adapter and GCM outputs, one training seed each.

The selfknow package timed is the one Python imports, so another version is timed by putting
its source first on the path, e.g. the last commit's:

    git archive HEAD src | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/src python benchmarks/bench_metrics_job.py --save /tmp/old.npz
    python benchmarks/bench_metrics_job.py --against /tmp/old.npz

``--save`` writes every replicate array and point value; ``--against`` reports the largest
difference from such a file (the two versions must agree to float rounding).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the rule runs with threads: 1
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import selfknow  # noqa: E402
from selfknow.protocols.persistent.metrics import compute_metrics  # noqa: E402

ADAPTER_METHODS = ("nonoracle", "nonoracle_multi_n1", "nonoracle_single", "nonoracle_single_n1", "oracle",
                   "oracle_multi_n1", "oracle_respective", "oracle_respective_n1", "oracle_single_data",
                   "oracle_pooled", "nonoracle_surrogate", "nonoracle_copy", "gcm")


def simulate(n_items: int, n_ckpt: int, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Correctness (n_ckpt, n_items) and method -> (1, n_ckpt, n_items) confidences."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(0.0, 1.5, n_items)
    logit = skill + np.linspace(-0.9, 0.9, n_ckpt)[:, None] + rng.normal(0, 1.0, (n_ckpt, n_items))
    y = (rng.uniform(size=logit.shape) < 1 / (1 + np.exp(-logit))).astype(float)

    def continuous(noise: float) -> np.ndarray:
        return 1 / (1 + np.exp(-(0.7 * logit + rng.normal(0, noise, logit.shape))))

    sc = np.round(continuous(1.0) * 10) / 10
    methods = {"end_correct": np.repeat(np.linspace(0, 1, n_ckpt)[:, None], n_items, axis=1),
               "sc": sc,
               "sc_posthoc": np.round(np.clip(sc * 0.8 + 0.1, 0, 1) * 6) / 6,
               "sc_surrogate": np.round(continuous(1.2) * 10) / 10,
               "sc_copy": np.repeat(np.round(continuous(1.2)[-1:] * 10) / 10, n_ckpt, axis=0),
               "gcm_posthoc": np.round(continuous(0.9) * 8) / 8}
    methods |= {m: continuous(rng.uniform(0.5, 1.5)) for m in ADAPTER_METHODS}
    return y, {m: c[None] for m, c in methods.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-items", type=int, default=500)
    ap.add_argument("--n-ckpt", type=int, default=4)
    ap.add_argument("--min-contrast", type=int, default=120)
    ap.add_argument("--n-boot", type=int, default=10_000)
    ap.add_argument("--n-boot-ece", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="write the points and replicates to this .npz")
    ap.add_argument("--against", help="report the largest difference from this .npz (--save)")
    args = ap.parse_args()

    y, methods = simulate(args.n_items, args.n_ckpt, args.seed)
    w0, c0 = time.perf_counter(), time.process_time()
    points, reps, pairs = compute_metrics(y, methods, min_contrast=args.min_contrast, n_boot=args.n_boot,
                                          n_boot_ece=args.n_boot_ece, seed=args.seed)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(f"selfknow from {os.path.dirname(selfknow.__file__)}")
    print(f"{args.n_items} questions, {args.n_ckpt} checkpoints, accuracy {np.round(y.mean(axis=1), 2).tolist()}, "
          f"{len(pairs)} contrast pairs (sizes {[p.size for p in pairs]}), {len(methods)} methods, "
          f"{args.n_boot} + {args.n_boot_ece} (ECE) replicates")
    print(f"compute_metrics: wall {wall:.1f} s, CPU {cpu:.1f} s")
    values = {f"point|{r.normaliser}|{r.method}|{r.metric}": np.array([r.value]) for r in points.itertuples()}
    values |= reps
    if args.save:
        np.savez(args.save, **values)
    if args.against:
        ref = np.load(args.against)
        if set(ref.files) != set(values):
            raise SystemExit(f"{args.against}: keys differ: {sorted(set(ref.files) ^ set(values))[:5]}")
        worst = max(float(np.nanmax(np.abs(ref[k].astype(float) - values[k].astype(float)), initial=0))
                    for k in values)
        nan_mismatch = sum(not np.array_equal(np.isnan(ref[k]), np.isnan(values[k])) for k in values)
        print(f"against {args.against}: max |difference| {worst:.2e} over {len(values)} arrays, "
              f"{nan_mismatch} with NaNs in other places")


if __name__ == "__main__":
    main()
