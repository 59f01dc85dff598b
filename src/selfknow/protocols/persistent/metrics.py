"""Every catalogued method's confidences on one evaluation set, as (seeds, checkpoints, items)
arrays (`assemble_methods`), and their metrics with the paired bootstrap replicates
(`compute_metrics`, §A.8): pure functions of the SC tables and the trained methods'
confidence tables, which `jobs.metrics_job` and `jobs.reliability_job` read and write."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.report.catalog import resolve
from selfknow.stats.isotonic import fit_isotonic
from selfknow.stats.persistent.bootstrap import bootstrap_persistent
from selfknow.stats.persistent.contrast import METRICS, Normalisation, contrast_pairs, persistent_metrics

from . import catalog as C
from .baselines import copy_confidences
from .methods import MethodInputs, matrix
from .variants import MAIN


def assemble_methods(eval_sc: Mapping[str, pd.DataFrame], eval_ckpts: Sequence[str], *,
                     train_sc: Mapping[str, pd.DataFrame] | None = None,
                     surrogate_sc: pd.DataFrame | None = None,
                     variant_frames: Sequence[pd.DataFrame] = (), gcm_frames: Sequence[pd.DataFrame] = (),
                     dataset: str = MAIN, equivalence=None) -> tuple[np.ndarray, np.ndarray, dict]:
    """(item ids, correctness (n_eval, n), method -> (n_seeds, n_eval, n) confidences).

    The model-free methods of `catalog.METHODS` whose inputs are given (`train_sc`: the
    training checkpoints' train-split SC, for post-hoc calibration; `surrogate_sc`: the last
    training checkpoint's SC on the same questions), in catalog order; then the trained
    methods, named by the catalog from their job and role: per variant of `variant_frames`
    (its rows of `dataset`) each seed's own scorings, and its surrogate and copy where the
    variant scores other checkpoints' answers; per GCM of `gcm_frames` its test-split
    confidences and their post-hoc map fitted on its train split."""
    ev = list(eval_ckpts)
    sc_all = pd.concat([eval_sc[c].assign(target=c) for c in ev], ignore_index=True)
    items = np.array(sorted(set.intersection(*(set(eval_sc[c]["item_id"]) for c in ev))))
    y = matrix(sc_all, ev, items, "correct", "SC correctness")
    inp = MethodInputs(ev, items, eval_sc, matrix(sc_all, ev, items, "confidence", "SC"), y,
                       train_sc=train_sc or None, surrogate_sc=surrogate_sc, equivalence=equivalence)
    methods: dict[str, np.ndarray] = {}
    for m in C.METHODS:
        if not m.needs_model and all(getattr(inp, i) is not None for i in m.inputs):
            methods[m.name] = resolve(m.confidences)(inp)
    by_variant: dict[str, list[pd.DataFrame]] = {}
    for f in variant_frames:
        for (variant, seed), g in f.groupby(["variant", "seed"], sort=True):
            by_variant.setdefault(variant, []).append(g)
    for variant, gs in by_variant.items():
        own, sur, cop = [], [], []
        for g in sorted(gs, key=lambda g: int(g["seed"].iloc[0])):
            g = g[g["dataset"] == dataset]
            mine = g[(g["scorer"] == g["target"]) & g["target"].isin(ev)]
            own.append(matrix(mine, ev, items, "confidence", f"{variant} seed {g['seed'].iloc[0] if len(g) else '?'}"))
            other = g[(g["scorer"] != g["target"]) & g["target"].isin(ev)]
            if len(other):
                sur.append(matrix(other, ev, items, "confidence", f"{variant} surrogate"))
                src = g[(g["scorer"] == g["target"]) & ~g["target"].isin(ev)]
                cop.append(np.repeat(copy_confidences(src[["item_id", "confidence"]], items)[None], len(ev), axis=0))
        methods[C.trained_method(variant)] = np.stack(own)
        if sur:
            methods[C.trained_method(variant, "surrogate")] = np.stack(sur)
            methods[C.trained_method(variant, "copy")] = np.stack(cop)
    if gcm_frames:
        gfs = sorted(gcm_frames, key=lambda g: int(g["seed"].iloc[0]) if "seed" in g else 0)  # released: no seed
        job = str(gfs[0]["method"].iloc[0])  # "gcm" (released) or "gcm_trained" (`jobs.gcm_job`)
        test = [g[g["split"] == "test"] for g in gfs]
        name = C.trained_method(job)
        methods[name] = np.stack([matrix(t, ev, items, "confidence", "GCM") for t in test])
        post = []
        for g, t in zip(gfs, methods[name]):
            tr = g[g["split"] == "train"]
            post.append(np.clip(fit_isotonic(tr["confidence"].to_numpy(float), tr["correct"].to_numpy(float))(t), 0, 1))
        methods[C.trained_method(job, "posthoc")] = np.stack(post)
    return items, y, methods


def contrast_size_frame(y: np.ndarray, ckpts: Sequence[str], min_contrast: int) -> pd.DataFrame:
    """Every ordered pair of evaluation checkpoints (Tables 8-10): contrast-set size and the
    number of questions the row checkpoint gets wrong and the column checkpoint right."""
    rows = []
    for a, ca in enumerate(ckpts):
        for b, cb in enumerate(ckpts):
            if a == b:
                continue
            diff = y[a] != y[b]
            rows.append({"row": ca, "col": cb, "row_index": a, "col_index": b, "size": int(diff.sum()),
                         "row_wrong_col_right": int((diff & (y[b] == 1)).sum()),
                         "used": bool(diff.sum() >= min_contrast), "n_items": int(y.shape[1])})
    return pd.DataFrame(rows)


def compute_metrics(y: np.ndarray, methods: Mapping[str, np.ndarray], *, min_contrast: int, n_boot: int,
                    n_boot_ece: int, seed: int, bt_methods: Sequence[str] | None = None,
                    clamp: float | None = None, bt_max_iter: int | None = None
                    ) -> tuple[pd.DataFrame, dict[str, np.ndarray], list]:
    """Point metrics (long: normaliser, method, metric, value) for Eq. 1 (every method) and the
    fitted §B.1 normalisation (`bt_methods`, default the catalog's `fitted_methods`), and
    paired bootstrap replicates ("<normaliser>|<method>|<metric>" -> (B,)): the non-ECE
    metrics with `n_boot` replicates, the two ECE metrics with the first `n_boot_ece` of the
    same replicate sequence (0: none). `clamp` and `bt_max_iter`: config
    `persistent.confidence_clamp` and `bt_max_iter` (`contrast.Normalisation`)."""
    bt_methods = C.fitted_methods() if bt_methods is None else bt_methods
    pairs = contrast_pairs(y, min_size=min_contrast)
    ece = ("contrast_ece", "full_ece")
    rows, reps = [], {}
    for norm, names in (("eq1", list(methods)), ("bt", [m for m in bt_methods if m in methods])):
        sub = {m: methods[m] for m in names}
        how = Normalisation(norm, clamp, bt_max_iter)
        for m, c in sub.items():
            for metric, v in persistent_metrics(c, y, pairs, normaliser=how).items():
                rows.append({"normaliser": norm, "method": m, "metric": metric, "value": v})
        for metrics, b in (([m for m in METRICS if m not in ece], n_boot), (list(ece), n_boot_ece)):
            if b <= 0 or not sub:
                continue
            out = bootstrap_persistent(sub, y, pairs, n_boot=b, seed=seed, normaliser=how, metrics=metrics)
            for m, d in out.items():
                for metric, arr in d.items():
                    reps[f"{norm}|{m}|{metric}"] = arr.astype(np.float32)
    return pd.DataFrame(rows), reps, pairs


def reliability_frame(y: np.ndarray, methods: Mapping[str, np.ndarray],
                      panels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`reliability_grid`'s input (panel, confidence, correct): per method of `panels`
    (method -> title; default the catalog's `reliability_panels`) that `methods` has, in
    `panels`' order, its first seed's confidences on every (evaluation checkpoint, item)
    answer, pooled over the checkpoints. `y`: (n_eval, n) correctness; `methods`: method ->
    (n_seeds, n_eval, n) confidences, as `assemble_methods` returns."""
    panels = C.reliability_panels() if panels is None else panels
    frames = []
    for m, label in panels.items():
        if m not in methods:
            continue
        conf = np.asarray(methods[m], dtype=float)
        if conf.ndim != 3 or conf.shape[1:] != y.shape:
            raise ValueError(f"method {m!r}: confidences of shape {conf.shape}, correctness {y.shape}")
        frames.append(pd.DataFrame({"panel": label, "confidence": conf[0].ravel(), "correct": y.ravel()}))
    if not frames:
        raise ValueError(f"no method of {list(panels)} among {list(methods)}")
    return pd.concat(frames, ignore_index=True)
