"""`selfknow` console script: one argparse subcommand per task, kept in a registry.

Add a subcommand with :func:`register` (name, help, a function adding its arguments, a
function running it). A command signals bad input by raising ``ValueError`` (or
``FileNotFoundError``); :func:`main` prints the message and exits with status 2.

    selfknow rasch MATRIX.csv OUTDIR [--method jml|cml] [--abilities wle|mle] [--no-bias-correction]
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], "int | None"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Configure
    run: Run


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, configure: Configure, run: Run) -> None:
    """Add a subcommand; names are unique."""
    if name in COMMANDS:
        raise ValueError(f"subcommand {name!r} is already registered")
    COMMANDS[name] = Command(name, help, configure, run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="selfknow", description="LLM self-knowledge pipeline tools.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args._run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"selfknow {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return int(status or 0)


# ----------------------------------------------------------------------------- rasch

def read_response_csv(path: str | Path) -> tuple["np.ndarray", list[str], list[str]]:  # noqa: F821
    """Read an examinee x item CSV: header row = (examinee column name, item ids...), then one
    row per examinee (id, responses...). A response is 0, 1 (also 0.0/1.0) or blank for
    missing. Returns (matrix with NaN for blanks, examinee ids, item ids)."""
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or len(header) < 2:
            raise ValueError(f"{path}: line 1: expected a header 'examinee,item1,item2,...'")
        items = [h.strip() for h in header[1:]]
        for k, it in enumerate(items, start=2):
            if not it:
                raise ValueError(f"{path}: line 1, column {k}: empty item id")
        dup = sorted({i for i in items if items.count(i) > 1})
        if dup:
            raise ValueError(f"{path}: line 1: duplicate item ids {dup}")
        values = {"0": 0.0, "1": 1.0, "0.0": 0.0, "1.0": 1.0, "": math.nan}
        rows, ids = [], []
        for lineno, rec in enumerate(reader, start=2):
            if not rec or all(not c.strip() for c in rec):
                continue
            if len(rec) != len(header):
                raise ValueError(f"{path}: line {lineno}: {len(rec)} fields, header has {len(header)}")
            eid = rec[0].strip()
            if not eid:
                raise ValueError(f"{path}: line {lineno}: empty examinee id")
            if eid in ids:
                raise ValueError(f"{path}: line {lineno}: duplicate examinee id {eid!r}")
            row = []
            for item, cell in zip(items, rec[1:]):
                v = values.get(cell.strip())
                if v is None:
                    raise ValueError(f"{path}: line {lineno} (examinee {eid!r}), column {item!r}: "
                                     f"{cell!r} is not 0, 1 or blank")
                row.append(v)
            ids.append(eid)
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no examinee rows")
    return np.array(rows, dtype=float), ids, items


def _configure_rasch(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrix", type=Path, help="CSV: header 'examinee,<item ids>', rows of 0/1, blank = missing")
    p.add_argument("outdir", type=Path, help="writes abilities.csv, difficulties.csv, fit.json here")
    p.add_argument("--method", choices=["jml", "cml"], default="jml",
                   help="difficulty calibration: JML with (L-1)/L correction, or CML (default: jml)")
    p.add_argument("--abilities", choices=["wle", "mle"], default="wle",
                   help="anchored ability estimator (default: wle, finite for extreme scores)")
    p.add_argument("--no-bias-correction", action="store_true", help="JML without the (L-1)/L factor")
    p.add_argument("--tol", type=float, default=1e-6, help="convergence tolerance in logits")
    p.add_argument("--max-iter", type=int, default=500)


def run_rasch(args: argparse.Namespace) -> int:
    """Fit the Rasch model to a response CSV and write abilities, difficulties and fit."""
    import numpy as np
    import pandas as pd

    from selfknow.records import write_csv, write_json
    from selfknow.stats.item_fit import band_counts, fit_band, item_fit_table
    from selfknow.stats.rasch import fit_rasch

    X, examinees, items = read_response_csv(args.matrix)
    try:
        fit = fit_rasch(X, args.method, bias_correction=not args.no_bias_correction,
                        ability_method=args.abilities, tol=args.tol, max_iter=args.max_iter)
    except ValueError as exc:
        raise ValueError(f"{args.matrix}: {exc}") from exc
    obs = ~np.isnan(X)
    args.outdir.mkdir(parents=True, exist_ok=True)
    abilities = pd.DataFrame({
        "examinee": examinees, "theta": fit.theta, "se_theta": fit.se_theta,
        "raw_score": np.nansum(X, axis=1), "n_responses": obs.sum(axis=1),
        "infit": fit.infit_person, "outfit": fit.outfit_person,
        "band": fit_band(fit.infit_person, fit.outfit_person), "status": fit.row_status,
    })
    difficulties = item_fit_table(fit, items)
    difficulties["n_responses"] = obs.sum(axis=0)
    difficulties["p_correct"] = np.nansum(X, axis=0) / np.maximum(obs.sum(axis=0), 1)
    write_csv(abilities, args.outdir / "abilities.csv")
    write_csv(difficulties, args.outdir / "difficulties.csv")
    write_json({
        "input": str(args.matrix),
        "method": fit.method,
        "ability_method": fit.ability_method,
        "bias_correction_factor": fit.bias_correction,
        "scale": "mean difficulty of the calibrated (non-extreme) items = 0",
        "converged": fit.converged,
        "n_iter": fit.n_iter,
        "n_examinees": len(examinees),
        "n_items": len(items),
        "missing_fraction": float(1.0 - obs.mean()),
        "extreme_rows": [{"examinee": examinees[i], "status": str(fit.row_status[i])} for i in fit.extreme_rows],
        "extreme_cols": [{"item": items[j], "status": str(fit.col_status[j])} for j in fit.extreme_cols],
        "item_fit_bands": band_counts(fit.infit_item, fit.outfit_item),
    }, args.outdir / "fit.json")
    print(f"rasch ({fit.method}): {len(examinees)} examinees x {len(items)} items, converged={fit.converged} "
          f"in {fit.n_iter} iterations; {len(fit.extreme_rows)} extreme rows, {len(fit.extreme_cols)} "
          f"extreme columns -> {args.outdir}")
    return 0


register("rasch", "Fit a Rasch model to an examinee x item 0/1 CSV (blank = missing).",
         _configure_rasch, run_rasch)


if __name__ == "__main__":
    sys.exit(main())
