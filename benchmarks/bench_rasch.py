"""Speed of our Rasch fit against girth's, same method, same matrix, same run.

    python benchmarks/bench_rasch.py [--persons 1000] [--items 10000] [--seed 0] [--no-large]

Cases (simulated Rasch data, θ ~ N(0,1), b ~ N(0,1)):
1. JML, complete 1,000 x 10,000: ours (`fit_rasch(method="jml")`, which also computes the
   anchored WLE abilities, standard errors and fit statistics) vs girth's `rasch_jml`
   (difficulties only; girth's default 25 sweeps and 1e-3 stopping rule).
2. JML, same matrix with 10 % of cells missing at random: girth's `rasch_jml` reads
   `girth.INVALID_RESPONSE` as missing (its kernel sign is 0 there, a constant term), so the
   comparison is again JML vs JML.
3. CML, complete 1,000 x 100: ours (`method="cml"`) vs girth's `rasch_conditional`
   (girth's CML costs O(L^2) per item and sweep, so it cannot run at 10,000 items).
4. `selfknow rasch` end to end (a fresh process: start-up, reading the CSV, the fit, writing
   the outputs) on a complete 12 x 40,000 matrix, vs girth's `rasch_jml` fit alone on the
   same matrix in memory. Acceptance: girth / ours >= 3.
5. `selfknow rasch` end to end on a 5,000 x 30,000 CSV with 50 % of cells missing: seconds
   and peak RSS of the process (GNU `/usr/bin/time -v`), against the budget of 30 s and
   2 GB. Skip with `--no-large`.
Prints seconds and the ratio girth / ours (> 1 means ours is faster), and the largest
difference in centred difficulties where the two estimate the same quantity (CML).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def simulate(n: int, L: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, 1.0, n)
    b = rng.normal(0.0, 1.0, L)
    return (rng.random((n, L)) < 1.0 / (1.0 + np.exp(b[None, :] - theta[:, None]))).astype(float)


def write_csv(path: Path, n: int, L: int, missing: float, seed: int, rows_per_chunk: int = 250) -> None:
    """A simulated response matrix as CSV (blank = missing), written a chunk of rows at a time:
    each cell is its digit (or nothing) and a separator, assembled as bytes."""
    rng = np.random.default_rng(seed)
    theta, b = rng.normal(0.0, 1.0, n), rng.normal(0.0, 1.0, L)
    with path.open("wb") as fh:
        fh.write(("examinee," + ",".join(f"q{j}" for j in range(L)) + "\n").encode())
        for r0 in range(0, n, rows_per_chunk):
            th = theta[r0:r0 + rows_per_chunk]
            x = rng.random((th.size, L)) < 1.0 / (1.0 + np.exp(b[None, :] - th[:, None]))
            cells = np.empty((th.size, 2 * L), dtype=np.uint8)
            cells[:, 0::2] = np.where(rng.random(x.shape) < missing, 0, ord("0") + x)
            cells[:, 1::2] = ord(",")
            cells[:, -1] = ord("\n")
            ids = [f"m{r0 + i}," for i in range(th.size)]
            for eid, row in zip(ids, cells):
                fh.write(eid.encode())
                fh.write(row[row != 0].tobytes())


def run_cli(matrix: Path, outdir: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of `selfknow rasch MATRIX OUTDIR --quiet` in
    a fresh process, measured by GNU time (a child forked from this large process would
    otherwise report this process's RSS as its own peak)."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "selfknow.cli", "rasch", str(matrix), str(outdir), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr}")
    def field(name: str) -> float:
        return float(re.search(rf"{re.escape(name)}: ([\d.]+)", proc.stderr).group(1))

    cpu = field("User time (seconds)") + field("System time (seconds)")
    return seconds, cpu, field("Maximum resident set size (kbytes)") / 1024.0


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
    ap.add_argument("--no-large", action="store_true", help="skip the 5,000 x 30,000 CSV case")
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

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small = tmp / "12x40000.csv"
        write_csv(small, 12, 40000, 0.0, args.seed + 3)
        X12 = np.loadtxt(small, delimiter=",", skiprows=1, usecols=range(1, 40001))
        _, t_girth = timed(lambda: rasch_jml(X12.astype(int).T))
        t_cli, cpu, rss = run_cli(small, tmp / "out12")
        print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"`selfknow rasch` 12x40000 CSV, end to end: {t_cli:.2f} s (CPU {cpu:.2f} s, peak RSS {rss:.0f} MB); "
              f"girth rasch_jml fit alone {t_girth:.2f} s; girth/ours = {t_girth / t_cli:.2f} (target >= 3)")
        if not args.no_large:
            large = tmp / "5000x30000.csv"
            t_write = timed(lambda: write_csv(large, 5000, 30000, 0.5, args.seed + 4))[1]
            t_cli, cpu, rss = run_cli(large, tmp / "out5000")
            print(f"`selfknow rasch` 5000x30000 CSV, 50% missing ({large.stat().st_size / 1e6:.0f} MB, "
                  f"written in {t_write:.0f} s), end to end: {t_cli:.1f} s (CPU {cpu:.1f} s), peak RSS "
                  f"{rss:.0f} MB; budget/ours: time {30 / t_cli:.2f}, memory {2048 / rss:.2f} (targets >= 1); "
                  f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
