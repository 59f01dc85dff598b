"""Does LCAE on a run show what issue #46 item 4 asks? (`selfknow check-estimators`.)

From a run's Stage-3 records (`lcae/stage3.parquet`): which examinees' LCAE beats the constant
0.5 with a 95 % interval over items (Table I's 'beats 0.5 in'), and, per DPR condition, how
many assessments took the Slow route and in how many examinees it differs from the condition
without routing. The check passes when at least one examinee beats the constant in some
condition and every DPR condition routes some items and differs in at least one examinee.
"""
from __future__ import annotations

import pandas as pd

from .tables import CONDITION_LABELS, beats_constant, route_counts


def lcae_check(stage3: pd.DataFrame) -> tuple[list[str], bool]:
    """The report's lines and whether the check passes."""
    if "lcae_gain" not in stage3.columns:
        return ["LCAE: the Stage-3 records have no reference points (a run from before they were kept)"], False
    conds = [c for c in CONDITION_LABELS if c in set(stage3["condition"])]
    beats = beats_constant(stage3, "lcae", conds)
    lines = [f"LCAE: {len(beats)} of {stage3['examinee'].nunique()} examinees beat the constant 0.5 "
             "(95 % interval over items) in some condition"]
    lines += [f"  {ex}: {', '.join(CONDITION_LABELS[c] for c in cs)}" for ex, cs in sorted(beats.items())]
    routes = route_counts(stage3)
    ok = bool(beats) and bool(routes)
    for r in routes:
        lines.append(f"LCAE {CONDITION_LABELS[r['condition']]}: Slow on {r['n_slow']} of {r['n']} assessments; "
                     f"differs from {CONDITION_LABELS[r['plain']]} in {r['differ']} of {r['examinees']} examinees")
        ok = ok and r["n_slow"] > 0 and bool(r["differ"])
    if not routes:
        lines.append("LCAE: no DPR condition in the records")
    lines.append(f"LCAE check {'passes' if ok else 'fails'}")
    return lines, ok
