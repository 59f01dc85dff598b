"""The self-knowledge card (SPEC §4): one row per model of the registry, joining what the three
papers measure about it, each number with its 95 % interval.

- Rasch ability θ (LCAE Stage 1, Standard prompting, the model's last checkpoint): θ ± 1.96 SE.
- LCAE (BCE) at baseline and with IDS+DPR (Stage 3, last checkpoint): mean over repeats with a
  Student-t interval.
- LADDER session CBF per level (L0 NoMemory, L1 ZS, L2 LSA, L3 OraclePDC, L4 GT-SelfStats):
  session mean with its session-bootstrap interval.
- Persistent calibration of self-consistency on the first training dataset: contrast-set AUC
  and full-set ECE (SmoothECE) with the paired-bootstrap percentile interval.
A cell is empty only where the config does not run that protocol for that model.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .catalog import CARD_CATALOG
from .jobs import write_catalog
from .tables import Built, table_job_provenance, value_interval

LADDER_LEVEL_ESTIMATORS = {"L0": "NoMemory", "L1": "ZS", "L2": "LSA", "L3": "OraclePDC", "L4": "GT-SelfStats"}
PERSISTENT_METHOD = "sc"
#: the level whose CBF is 1 by construction (verified counts), so its cell measures nothing
FIXED_LEVEL = "OraclePDC"
#: the levels a model states when prompted (LADDER's ZS, LSA, GT-SelfStats)
PROMPTED_LEVELS = ("ZS", "LSA", "GT-SelfStats")


def lcae_columns(persons: pd.DataFrame, stage3: pd.DataFrame, last_ckpt: Mapping[str, str]) -> pd.DataFrame:
    from selfknow.stats.hypothesis import mean_ci

    rows = []
    for model, ckpt in last_ckpt.items():
        p = persons[(persons.model == model) & (persons.checkpoint == ckpt) & (persons.strategy == "standard")]
        if p.empty:
            continue
        th, se = float(p.theta.iloc[0]), float(p.se.iloc[0])
        row = {"model": model, "ability θ": value_interval(th, th - 1.96 * se, th + 1.96 * se)}
        for cond, label in (("baseline", "LCAE baseline"), ("ids_dpr", "LCAE IDS+DPR")):
            v = stage3[(stage3.model == model) & (stage3.checkpoint == ckpt) & (stage3.condition == cond)]["lcae"]
            if len(v):
                m, lo, hi = (float(x) for x in mean_ci(v.to_numpy(), 0.95))
                row[label] = value_interval(m, lo, hi) if len(v) > 1 else value_interval(m, np.nan, np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def ladder_columns(main: pd.DataFrame, stated_by: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Session CBF per level; a prompted level's cell names the model that stated it
    (`stated_by`: model -> that model)."""
    rows = []
    for model, g in main.groupby("model", sort=False):
        row = {"model": model}
        for level, est in LADDER_LEVEL_ESTIMATORS.items():
            r = g[g.estimator == est]
            if len(r):
                r = r.iloc[0]
                cell = value_interval(float(r.CBF), float(r.get("CI_low", np.nan)), float(r.get("CI_high", np.nan)))
                if est in PROMPTED_LEVELS and stated_by is not None:
                    cell += f" (stated by {stated_by.get(model, model)})"
                elif est == FIXED_LEVEL:
                    cell += " (by construction)"
                row[f"CBF {level} {est}"] = cell
        rows.append(row)
    return pd.DataFrame(rows)


def persistent_columns(metric_files: Mapping[str, tuple[pd.DataFrame, Mapping[str, np.ndarray]]]) -> pd.DataFrame:
    """`metric_files`: model -> (points long frame [normaliser, method, metric, value], replicates)."""
    rows = []
    for model, (points, reps) in metric_files.items():
        row = {"model": model}
        for metric, label in (("contrast_auc", "contrast AUC (SC)"), ("full_ece", "full-set ECE (SC)")):
            sel = points[(points.normaliser == "eq1") & (points.method == PERSISTENT_METHOD) & (points.metric == metric)]
            if sel.empty:
                continue
            v = float(sel.value.iloc[0])
            r = reps.get(f"eq1|{PERSISTENT_METHOD}|{metric}")
            lo, hi = (np.nanpercentile(r, [2.5, 97.5]) if r is not None and np.isfinite(r).any()
                      else (np.nan, np.nan))
            row[label] = value_interval(v, lo, hi)
        rows.append(row)
    return pd.DataFrame(rows)


def knowledge_card(models: Sequence[str], parts: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per model in registry order; the columns of every part (protocol name ->
    frame) joined by model, and `not run`: the protocols with no cell for the model (their
    config does not run it), so that an empty row says why it is empty."""
    card = pd.DataFrame({"model": list(models)})
    for part in parts.values():
        if len(part):
            card = card.merge(part, on="model", how="left")
    card["not run"] = [", ".join(name for name, part in parts.items()
                                 if not (len(part) and model in set(part["model"]))) or "-"
                       for model in card["model"]]
    return card.fillna("")


def card_table(models: Sequence[str], last_ckpt: Mapping[str, str], lcae_persons: str | None,
               lcae_stage3: str | None, ladder_main: str | None, persistent: Mapping[str, tuple[str, str]],
               stated_by: Mapping[str, str] | None) -> Built:
    """The card from each protocol's outputs that exist in this config (a path None: the config
    does not run it); `stated_by` names who stated each LADDER model's prompted levels
    (`selfknow.config.stated_by`)."""
    parts = {}
    if lcae_persons and lcae_stage3:
        parts["LCAE"] = lcae_columns(pd.read_parquet(lcae_persons), pd.read_parquet(lcae_stage3), last_ckpt)
    if ladder_main:
        parts["LADDER"] = ladder_columns(pd.read_csv(ladder_main), stated_by)
    if persistent:
        files = {}
        for model, (points, reps) in persistent.items():
            with np.load(reps) as z:
                files[model] = (pd.read_parquet(points), {k: z[k] for k in z.files})
        parts["persistent"] = persistent_columns(files)
    card = knowledge_card(models, parts)
    return Built(card, summary={"models": len(card), "columns": card.shape[1] - 1})


def knowledge_card_job(models: Sequence[str], last_ckpt: Mapping[str, str], persistent: Mapping[str, tuple[str, str]],
                       report: Mapping, outputs: Mapping[str, str], config: Mapping, input_files: Sequence[str],
                       lcae_persons: str | None = None, lcae_stage3: str | None = None,
                       ladder_main: str | None = None) -> dict:
    """The self-knowledge card (rules/card.smk), from what each protocol of the config wrote."""
    from selfknow.config import stated_by

    prov = table_job_provenance(config, input_files, report, models=list(models),
                                sections=[s for s in ("lcae", "ladder", "persistent") if s in config])
    known = {"models": list(models), "last_ckpt": dict(last_ckpt), "lcae_persons": lcae_persons,
             "lcae_stage3": lcae_stage3, "ladder_main": ladder_main, "persistent": persistent,
             "stated_by": stated_by(config, config["ladder"]["models"]) if "ladder" in config else None}
    return write_catalog(CARD_CATALOG, known, outputs, prov)
