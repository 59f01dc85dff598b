"""The "what the default finds" tables: each paper's headline comparisons, one row each, with
the difference the run measured, its 95 % interval and whether it agrees with the direction
the paper states. A paper's protocol computes the differences from its own replicates; this
module only judges and lays out the rows, so that the three papers' tables read alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .tables import format_number

#: the interval every row gives
LEVEL = 0.95
#: the verdicts a row can carry
AGREES, DISAGREES, UNDECIDED, NO_CLAIM, NO_INTERVAL, NO_DIFFERENCE = (
    "agrees", "disagrees", "undecided (interval includes 0)", "no direction stated", "no interval",
    "no difference on any unit")
#: what a row prints for an interval that is a single point (every unit gave the same difference)
SINGLE_POINT = "none: every unit alike"
#: bounds closer than this are one point (a difference of float rounding, not of the units)
POINT_TOL = 1e-12
COLUMNS = ("comparison", "difference", "95 % interval", "paper's direction", "verdict", "claim tested")


@dataclass(frozen=True)
class Claim:
    """A comparison a paper states: `direction` +1 (the difference is above 0), -1 (below),
    0 (no difference: the paper reports none) or None (the paper states no direction, the row
    reports the run only); `quote`: the paper's words (or SPEC.md's), with where they stand."""

    direction: int | None
    quote: str


def verdict(lo: float, hi: float, direction: int | None) -> str:
    """How a difference with interval [lo, hi] stands against a stated `direction`: undecided
    where the interval includes 0; for a claim of no difference, disagrees where it excludes 0
    (and is undecided otherwise, since an interval that includes 0 shows no equivalence); a
    difference of exactly 0 on every unit is none at all, said as such."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return NO_INTERVAL
    if max(abs(lo), abs(hi)) <= POINT_TOL:
        return NO_DIFFERENCE
    if lo <= 0 <= hi:
        return UNDECIDED
    if direction is None:
        return NO_CLAIM
    if direction == 0:
        return DISAGREES
    return AGREES if (lo > 0) == (direction > 0) else DISAGREES


def direction_text(direction: int | None) -> str:
    return {1: "> 0", -1: "< 0", 0: "= 0", None: "none stated"}[direction]


def signed(v: float, digits: int = 3) -> str:
    """`v` with its sign at `digits` decimals; a value that rounds to zero prints as 0 (never
    "-0.000")."""
    s = f"{v:+.{digits}f}"
    return f"{0:.{digits}f}" if float(s) == 0 else s


def interval_text(lo: float, hi: float, digits: int = 3) -> str:
    """"[lo, hi]" with signed bounds (`signed`); a single point (every unit gave the same
    difference) is not printed as an interval."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "none"
    if hi - lo <= POINT_TOL:
        return SINGLE_POINT
    # a real interval narrower than `digits` shows more of them, so that it never reads as a point
    d = next((k for k in range(digits, digits + 6) if signed(lo, k) != signed(hi, k)), digits + 5)
    return f"[{signed(lo, d)}, {signed(hi, d)}]"


def row(comparison: str, diff: float, lo: float, hi: float, claim: Claim) -> dict:
    """One row of a findings table."""
    return {"comparison": comparison, "difference": float(diff), "95 % interval": interval_text(lo, hi),
            "paper's direction": direction_text(claim.direction), "verdict": verdict(lo, hi, claim.direction),
            "claim tested": claim.quote}


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(COLUMNS))


def tally_note(table: pd.DataFrame) -> str:
    """The note every findings table carries: how many rows agree, disagree, are undecided."""
    counts = table["verdict"].value_counts()
    parts = [f"{counts.get(v, 0)} {v}" for v in (AGREES, DISAGREES, UNDECIDED, NO_CLAIM, NO_DIFFERENCE, NO_INTERVAL)
             if counts.get(v, 0)]
    return (f"Of {len(table)} comparisons: " + ", ".join(parts) + ". A row agrees when its "
            f"{LEVEL:.0%}".replace("%", " %") + " interval excludes 0 on the side the paper states; it is "
            "undecided when the interval includes 0, whatever the point value.")


#: the papers' findings tables, in the order the README summarises them: (paper, title)
PAPERS = (("persistent", "Persistent calibration"), ("ladder", "LADDER"), ("lcae", "LCAE"))
#: how the summary names each verdict's group, in its order
GROUPS = ((DISAGREES, "Disagree"), (AGREES, "Agree"), (UNDECIDED, "Undecided"), (NO_CLAIM, "No direction stated"),
          (NO_DIFFERENCE, "No difference on any unit"), (NO_INTERVAL, "No interval"))


def summary_markdown(tables: dict[str, pd.DataFrame]) -> str:
    """The README's "what the default finds": per paper whose findings table is given (`tables`,
    paper -> the table as its CSV holds it), the tally, then every row, grouped by verdict, with
    its difference (as the table prints it) and interval. Nothing is chosen: each row of each
    table appears once."""
    known = {v for v, _ in GROUPS}
    lines = []
    for paper, title in PAPERS:
        table = tables.get(paper)
        if table is None:
            continue
        unknown = sorted(set(table["verdict"]) - known)
        if unknown:
            raise ValueError(f"{paper} findings: unknown verdicts {unknown}")
        counts = [f"{(table['verdict'] == v).sum()} {name.lower()}" for v, name in GROUPS if (table["verdict"] == v).any()]
        n = len(table)
        lines.append(f"- **{title}** (`results/tables/{paper}/findings.md`): {n} comparison{'s' * (n != 1)}; "
                     + ", ".join(counts) + ".")
        for v, name in GROUPS:
            rows = table[table["verdict"] == v]
            if len(rows):
                cells = "; ".join(f"{r['comparison']} {format_number(float(r['difference']))} {r['95 % interval']}"
                                  for _, r in rows.iterrows())
                lines.append(f"  - {name}: {cells}.")
    return "\n".join(lines) + "\n"
