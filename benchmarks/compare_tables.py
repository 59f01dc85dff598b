"""Compare two results directories' tables (and figure data CSVs) cell by cell.

    python benchmarks/compare_tables.py BEFORE_RESULTS AFTER_RESULTS [--rtol 1e-9] [--atol 1e-12]

Numeric columns must agree to |a - b| <= atol + rtol * max(|a|, |b|), every other column
exactly; rows are matched by position, columns by name. Prints each common table's largest
absolute and relative difference and what differs, then the tables only one side has. Exits 1
when a table present in both differs beyond the tolerance.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selfknow.report.compare import compare_results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-9, help="relative tolerance of numeric cells (default 1e-9)")
    ap.add_argument("--atol", type=float, default=1e-12,
                    help="absolute tolerance, for cells at or near zero (default 1e-12)")
    args = ap.parse_args()
    diffs, only_before, only_after = compare_results(args.before, args.after, rtol=args.rtol, atol=args.atol)
    for d in diffs:
        print(f"{'equal ' if d.equal else 'DIFFER'}  {d.name}  max abs {d.max_abs:.2g}, max rel {d.max_rel:.2g}")
        for p in d.problems:
            print(f"        {p}")
    for side, names in (("before", only_before), ("after", only_after)):
        for name in names:
            print(f"only {side}: {name}")
    n_bad = sum(not d.equal for d in diffs)
    print(f"{len(diffs)} tables in both: {len(diffs) - n_bad} equal, {n_bad} differ; "
          f"{len(only_before)} only before, {len(only_after)} only after")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
