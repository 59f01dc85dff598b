"""Speed of our Rasch fit against girth's, same method, same matrix, same run.

    python benchmarks/bench_rasch.py [--persons 1000] [--items 10000] [--seed 0]

Cases (simulated Rasch data, θ ~ N(0,1), b ~ N(0,1)):
1. JML, complete 1,000 x 10,000: ours (`fit_rasch(method="jml")`, which also computes the
   anchored WLE abilities, standard errors and fit statistics) vs girth's `rasch_jml`
   (difficulties only; girth's default 25 sweeps and 1e-3 stopping rule).
2. JML, same matrix with 10 % of cells missing at random: girth's `rasch_jml` reads
   `girth.INVALID_RESPONSE` as missing (its kernel sign is 0 there, a constant term), so the
   comparison is again JML vs JML.
3. CML, complete 1,000 x 100: ours (`method="cml"`) vs girth's `rasch_conditional`
   (girth's CML costs O(L^2) per item and sweep, so it cannot run at 10,000 items).
Prints seconds and the ratio girth / ours (> 1 means ours is faster), and the largest
difference in centred difficulties where the two estimate the same quantity (CML).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def simulate(n: int, L: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, 1.0, n)
    b = rng.normal(0.0, 1.0, L)
    return (rng.random((n, L)) < 1.0 / (1.0 + np.exp(b[None, :] - theta[:, None]))).astype(float)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--persons", type=int, default=1000)
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--cml-items", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from girth import INVALID_RESPONSE, rasch_conditional, rasch_jml

    from selfknow.stats.rasch import fit_rasch

    X = simulate(args.persons, args.items, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    Xm = X.copy()
    Xm[rng.random(X.shape) < 0.10] = np.nan
    Xm_girth = np.where(np.isnan(Xm), INVALID_RESPONSE, Xm).astype(int).T  # girth: items x persons

    rows = []
    ours, t_ours = timed(lambda: fit_rasch(X, "jml"))
    _, t_girth = timed(lambda: rasch_jml(X.astype(int).T))
    rows.append((f"JML {args.persons}x{args.items} complete", t_ours, t_girth, ours.n_iter, ""))
    ours, t_ours = timed(lambda: fit_rasch(Xm, "jml"))
    _, t_girth = timed(lambda: rasch_jml(Xm_girth))
    rows.append((f"JML {args.persons}x{args.items} 10% missing", t_ours, t_girth, ours.n_iter, ""))
    Xc = simulate(args.persons, args.cml_items, args.seed + 2)
    ours, t_ours = timed(lambda: fit_rasch(Xc, "cml"))
    g, t_girth = timed(lambda: rasch_conditional(Xc.astype(int).T))
    gb = g["Difficulty"] - g["Difficulty"].mean()
    rows.append((f"CML {args.persons}x{args.cml_items} complete", t_ours, t_girth, ours.n_iter,
                 f"max |Δb| = {np.nanmax(np.abs(gb - ours.b)):.4f}"))

    print(f"{'case':34s} {'ours s':>8s} {'girth s':>8s} {'girth/ours':>10s} {'iter':>5s}")
    for name, to, tg, it, note in rows:
        print(f"{name:34s} {to:8.2f} {tg:8.2f} {tg / to:10.2f} {it:5d}  {note}")


if __name__ == "__main__":
    main()
