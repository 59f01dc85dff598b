"""What the default finds (persistent calibration): the paper's headline comparisons on
contrast-set AUC (`findings_table`, `tables/persistent/findings`), each a difference of two
methods' point values with its paired bootstrap interval (§A.8), and Figure 3's
forward-minus-backward transfer asymmetry (§4.3) (`transfer_asymmetry`). `tables.findings`
builds the table."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.report.findings import Claim
from selfknow.stats.persistent.contrast import CHANCE
from selfknow.stats.persistent.significance import percentile_interval

from .catalog import GCM_METHODS

if TYPE_CHECKING:
    from .tables import MetricFile

_ORACLE_ROOM = Claim(1, "\"SC and non-oracle training consistently have worse contrast-set calibration than "
                        "oracle training, showing room for improvement\" (§3.2, Table 1)")
_MULTI = Claim(1, "\"In both oracle and non-oracle settings, we find that contrast-set calibration improves when "
                  "we introduce multi-checkpoint training\" (§1, Table 3)")
_NONTRIVIAL = Claim(1, "SC and non-oracle training \"appear nontrivial, outperforming the end-correct baseline in "
                       "almost all cases (Table 1)\" (§3.2)")
#: the paper's headline comparisons on contrast AUC: (label, method, the method or constant it is
#: set against, the claim); "{gcm}" is the GCM the config runs
FINDINGS: tuple[tuple[str, str, str | float, Claim], ...] = (
    ("Oracle − SC", "oracle", "sc", _ORACLE_ROOM),
    ("Oracle − non-oracle", "oracle", "nonoracle", _ORACLE_ROOM),
    ("Oracle − end-correct baseline", "oracle", "end_correct", Claim(
        1, "oracle training is the reference that quantifies \"the room for improvement of a confidence "
           "estimator\" (§3.1); the end-correct baseline is Table 1's floor")),
    ("SC − end-correct baseline", "sc", "end_correct", _NONTRIVIAL),
    ("Non-oracle − end-correct baseline", "nonoracle", "end_correct", _NONTRIVIAL),
    (f"Non-oracle − chance ({CHANCE['contrast_auc']:g})", "nonoracle", CHANCE["contrast_auc"], Claim(
        1, "non-oracle training's contrast AUC is 0.757-0.821 in Table 1: \"imperfect contrast-set calibration, "
           "it appears nontrivial\" (§3.2)")),
    ("Non-oracle multi − single checkpoint", "nonoracle", "nonoracle_single", _MULTI),
    ("Oracle multi − respective checkpoint", "oracle", "oracle_respective", Claim(
        1, "\"multi-checkpoint training in the oracle setting outperforms respective-checkpoint training\" "
           "(§1, Table 3)")),
    ("GCM headroom: oracle − GCM", "oracle", "{gcm}", Claim(
        1, "\"GCMs Do Not Satisfy Persistent Calibration\": Figure 2 plots the GCM's headroom on contrast-set "
           "AUC against oracle training (§3.2)")),
    (f"GCM − chance ({CHANCE['contrast_auc']:g})", "{gcm}", CHANCE["contrast_auc"], Claim(
        1, "the headroom is measured against a GCM that \"matches oracle performance on Olmo 3 7B\" (§3.2), "
           "far above chance")),
)


_TRANSFER_CLAIM = Claim(1, "\"Forward transfer (top right) is strong, while backward transfer (bottom left) is "
                          "weak\" (Figure 3; \"AUC 0.870 on 10% → 100%\" against \"0.671 for 100% → 10%\", §4.3)")


def transfer_asymmetry(transfer_conf: pd.DataFrame, order: Sequence[str], n_boot: int, seed: int
                       ) -> tuple[float, float, float]:
    """Figure 3's asymmetry (§4.3) as one number: the mean full-set AUC of the forward cells
    (an adapter trained on an earlier checkpoint scoring a later one) minus that of the backward
    cells, with its percentile `findings.LEVEL` interval over `n_boot` resamples of the
    questions, one resample shared by every cell (`learning_check.resample_indices`, `seed`)."""
    from selfknow.report.findings import LEVEL
    from selfknow.stats.classification import auc

    from .learning_check import resample_indices, resampled_aucs

    rank = {c: k for k, c in enumerate(order)}
    cells = {1: [], -1: []}
    idx = None
    own = transfer_conf[transfer_conf["target"] == transfer_conf["scorer"]]
    for (a, c), g in own.groupby(["adapter", "target"], sort=True):
        if a not in rank or c not in rank or a == c:
            continue
        g = g.sort_values("item_id")
        p, y = g["confidence"].to_numpy(float), g["correct"].to_numpy(float)
        if idx is None:
            idx = resample_indices(len(g), n_boot, seed)
        elif idx.shape[1] != len(g):
            raise ValueError(f"transfer cell {a} → {c} scores {len(g)} questions, the others {idx.shape[1]}")
        cells[1 if rank[a] < rank[c] else -1].append((auc(p, y), resampled_aucs(p, y, idx)))
    if not cells[1] or not cells[-1]:
        return np.nan, np.nan, np.nan

    def mean(direction: int, k: int):
        return np.mean([cell[k] for cell in cells[direction]], axis=0)

    diff = mean(1, 0) - mean(-1, 0)
    lo, hi = percentile_interval(mean(1, 1) - mean(-1, 1), LEVEL) if n_boot else (np.nan, np.nan)
    return float(diff), lo, hi


def findings_table(files: Mapping[tuple, MetricFile], asymmetry: Mapping[str, tuple[str, tuple]] | None = None
                   ) -> tuple[pd.DataFrame, str]:
    """What the default finds (`selfknow.report.findings`): per metric file (model, training
    dataset), each comparison of `FINDINGS` on contrast AUC, the difference of the point values
    with the paired percentile interval of the difference of the bootstrap replicates (§A.8;
    against a constant, the replicates minus it). A comparison whose methods the metric file
    lacks (no GCM in the config) is left out and named in the note. `asymmetry`: per training
    dataset, (model, `transfer_asymmetry`'s difference and interval), a row each."""
    from selfknow.report.findings import LEVEL, frame, row, tally_note

    rows, absent = [], []
    for (model, dataset, _), f in files.items():
        have = set(f.points["method"])
        gcm = next((g for g in GCM_METHODS if g in have), None)
        for label, a, b, claim in FINDINGS:
            a, b = (x.format(gcm=gcm) if isinstance(x, str) and gcm else x for x in (a, b))
            if a not in have or (isinstance(b, str) and b not in have):
                absent.append(label)
                continue
            diff = f.point(a, "contrast_auc") - (b if isinstance(b, float) else f.point(b, "contrast_auc"))
            ra = f.reps(a, "contrast_auc")
            rb = np.float64(b) if isinstance(b, float) else f.reps(b, "contrast_auc")
            lo = hi = np.nan
            if ra is not None and rb is not None:
                lo, hi = percentile_interval(np.asarray(ra, dtype=float) - np.asarray(rb, dtype=float), LEVEL)
            rows.append(row(f"{model}, {dataset}: {label} (contrast AUC)", diff, lo, hi, claim))
    for dataset, (model, (diff, lo, hi)) in (asymmetry or {}).items():
        rows.append(row(f"{model}, {dataset}: forward − backward transfer (full-set AUC, Figure 3's cells, "
                        f"one seed)", diff, lo, hi, _TRANSFER_CLAIM))
    table = frame(rows)
    note = (tally_note(table) + " Differences of contrast-set AUC (mean over the used evaluation-checkpoint pairs) "
            "on each training dataset's test split; intervals: paired percentile intervals of the class-stratified "
            "bootstrap replicates the metrics job keeps (§A.8), trained methods averaged over their seeds inside "
            "each replicate.")
    if absent:
        note += " Not computed in this configuration: " + ", ".join(dict.fromkeys(absent)) + "."
    return table, note
