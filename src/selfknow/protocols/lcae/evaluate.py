"""LCAE's Rasch fit and Stage 3 on records in the formats of `records` (SPEC §3): the pure
functions the workflow's jobs (`jobs.irt_job`, `jobs.stage3_job`) and `selfknow lcae-eval`
both call, so the command and the DAG compute the same numbers."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from selfknow.records import RecordTable, write_csv, write_parquet
from selfknow.report.catalog import names
from selfknow.stats.item_fit import fit_band
from selfknow.stats.lcae import lcae
from selfknow.stats.rasch import estimate_abilities, fit_rasch, irt_item_error_p, irt_model_error_p, response_matrix

from .catalog import TABLES as CATALOG_TABLES
from .examinees import STATUSES
from .records import read_stage1, read_stage2

#: the tables and figures `tables.write_tables` writes: every entry of the catalog
TABLES = list(names(CATALOG_TABLES, figure=False))
FIGURES = list(names(CATALOG_TABLES, figure=True))


def fit_stage1(stage1: pd.DataFrame, *, method: str, repeats: str = "first"
               ) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    """Stage 1's joint Rasch fit over every examinee of Stage-1 records (`records.STAGE1_COLUMNS`):
    (persons: ability with SE, fit, extreme flag and how many replies were unparsed or
    truncated; items: difficulty b with IRT_ItemErrorP; whether the fit converged). An examinee's repeats of an item are
    one response: `repeats="first"` the lowest repeat's, `"majority"` the majority outcome."""
    recs = stage1.sort_values("repeat", kind="stable")
    X, ex_ids, item_ids = response_matrix(recs["examinee"], recs["item"], recs["correct"].astype(float),
                                          rule=repeats, common_items=False)
    fit = fit_rasch(X, method=method)
    meta = recs.drop_duplicates("examinee").set_index("examinee").loc[ex_ids]
    persons = pd.DataFrame({
        "examinee": ex_ids, "model": meta["model"].to_numpy(), "checkpoint": meta["checkpoint"].to_numpy(),
        "strategy": meta["strategy"].to_numpy(), "theta": fit.theta, "se": fit.se_theta,
        "raw_score": np.nansum(X, axis=1), "n_items": np.sum(~np.isnan(X), axis=1),
        "infit": fit.infit_person, "outfit": fit.outfit_person, "extreme": fit.row_status})
    counts = pd.crosstab(recs["examinee"], recs["status"]).reindex(columns=STATUSES, fill_value=0)
    for s in ("unparsed", "truncated"):
        persons[f"n_{s}"] = counts[s].reindex(ex_ids).to_numpy()
    items = pd.DataFrame({
        "item_id": item_ids, "b": fit.b, "se": fit.se_b, "infit": fit.infit_item, "outfit": fit.outfit_item,
        "band": fit_band(fit.infit_item, fit.outfit_item), "extreme": fit.col_status,
        "item_error_p": irt_item_error_p(fit.theta, fit.b), "p_correct": np.nanmean(X, axis=0)})
    return persons, items, bool(fit.converged)


def stage3(stage2: pd.DataFrame, persons: pd.DataFrame, items: pd.DataFrame, *, eps: float) -> pd.DataFrame:
    """Stage 3 per (examinee, condition, repeat) of Stage-2 records (`records.STAGE2_COLUMNS`):
    the ability re-estimated from the final answers with Stage-1 difficulties fixed, and LCAE
    (BCE; squared error as the named variant) of the stated error probability against
    IRT_ModelErrorP of the examinee's Stage-1 ability. The abilities use the items Stage 1's
    used, the calibrated (non-extreme) ones, so that identical answers give identical
    abilities; LCAE and accuracy use every item (an extreme item has its adjusted difficulty).
    Empty error probabilities (unparsed or truncated) are left out of the mean and counted."""
    b = items.set_index("item_id")["b"]
    calibrated = set(items.loc[items["extreme"] == "", "item_id"])
    people = persons.set_index("examinee")
    rows = []
    for examinee, s2 in stage2.groupby("examinee", sort=False):
        person = people.loc[examinee]
        theta1 = float(person["theta"])
        for (cond, rep), g in s2.groupby(["condition", "repeat"], sort=True):
            g = g.set_index("item").loc[b.index.intersection(g["item"])]
            bq = b.loc[g.index].to_numpy()
            x = g["correct_final"].astype(float).to_numpy()
            cal = g.index.isin(list(calibrated))
            theta, se = estimate_abilities(x[None, cal], bq[cal])
            e = irt_model_error_p(np.array([theta1]), bq)[0]
            c = g["error_p"].to_numpy(dtype=float)
            ok = np.isfinite(c)
            cut = g["truncated"].to_numpy(dtype=bool)
            slow = g["route"].to_numpy() == "slow"
            rows.append(dict(
                model=person["model"], checkpoint=person["checkpoint"], examinee=examinee, condition=cond,
                repeat=int(rep), theta_stage1=theta1, theta=float(theta[0]), se=float(se[0]),
                accuracy=float(x.mean()), lcae=float(lcae(e[ok], c[ok], eps=eps, kind="bce")),
                lcae_squared=float(lcae(e[ok], c[ok], eps=eps, kind="squared")), n_items=int(len(g)),
                n_ability_items=int(cal.sum()), n_unparsed=int((~ok & ~cut).sum()), n_truncated=int(cut.sum()),
                slow_share=float(slow.mean()), n_slow=int(slow.sum()),
                tokens_in=int(g["tokens_in"].sum()), tokens_out=int(g["tokens_out"].sum()),
                **reference_points(e[ok], c[ok], eps=eps)))
    return pd.DataFrame(rows)


def reference_points(e: np.ndarray, c: np.ndarray, *, eps: float) -> dict[str, float]:
    """What an examinee's LCAE (BCE, and its squared variant) is measured against, over the
    items it assessed: `<kind>_const`, the LCAE of stating 0.5 for every item (BCE: ln 2);
    `<kind>_floor`, the LCAE of stating the reference e itself (BCE: the mean binary entropy
    of e, the least any assessment can score); `<kind>_gain`, how much better than the
    constant the stated ĉ is (const − LCAE), with `<kind>_gain_se`, its standard error over
    the items (sd of the per-item differences / sqrt(Q))."""
    out = {}
    half = np.full_like(e, 0.5)
    for name, kind in (("lcae", "bce"), ("lcae_squared", "squared")):
        per_item = lcae(e[:, None], c[:, None], eps=eps, kind=kind)
        gain = lcae(e[:, None], half[:, None], eps=eps, kind=kind) - per_item
        n = len(gain)
        out.update({f"{name}_const": float(lcae(e, half, eps=eps, kind=kind)) if n else float("nan"),
                    f"{name}_floor": float(lcae(e, e, eps=eps, kind=kind)) if n else float("nan"),
                    f"{name}_gain": float(gain.mean()) if n else float("nan"),
                    f"{name}_gain_se": float(gain.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")})
    return out


def read_prices(path: str | Path) -> dict[str, list[float]]:
    """Prices per model from a record table with columns model, price_in, price_out (USD per
    million tokens), the form of the config's `lcae.prices`."""
    t = RecordTable(path)
    t.require("model", "price_in", "price_out")
    p_in, p_out = t.number("price_in"), t.number("price_out")
    for column, x in (("price_in", p_in), ("price_out", p_out)):
        bad = np.flatnonzero(x < 0)
        if bad.size:
            raise t.error(int(bad[0]), column, f"a price cannot be negative, got {x[bad[0]]}")
    return {m: [float(a), float(b)] for m, a, b in zip(t.text("model"), p_in, p_out)}


def lcae_eval(stage1_path: str | Path, stage2_path: str | Path, outdir: str | Path, *, method: str, eps: float,
              repeats: str = "first", prices: dict[str, list[float]] | None = None,
              progress: Callable[[str], None] = lambda message: None) -> dict:
    """`selfknow lcae-eval`: Stage-1 responses and Stage-2 self-assessments (docs/own-results.md)
    -> the workflow's LCAE outputs under `outdir`: irt/persons.parquet, irt/items.parquet,
    stage3.parquet, tables/<table>.{csv,md,tex,html} for `TABLES`, and with `prices` each
    figure of `FIGURES` (Figure 2: figure2.png) and its points with cost efficiency
    (figure2_points.csv). Every record is read and checked, and the fit and Stage 3 computed,
    before the first file is written; each file is written atomically."""
    from .tables import write_tables

    s1, t1 = read_stage1(stage1_path)
    progress(f"{t1.path}: {len(s1)} responses of {s1['examinee'].nunique()} examinees to {s1['item'].nunique()} items")
    s2, t2 = read_stage2(stage2_path, s1)
    progress(f"{t2.path}: {len(s2)} self-assessments of {s2['examinee'].nunique()} examinees")
    persons, items, converged = fit_stage1(s1, method=method, repeats=repeats)
    if not converged:
        progress(f"warning: the Rasch fit ({method}) did not converge")
    s3 = stage3(s2, persons, items, eps=eps)
    progress(f"Stage 3: {len(s3)} (examinee, condition, repeat) rows")
    out = Path(outdir)
    paths = {"persons": out / "irt" / "persons.parquet", "items": out / "irt" / "items.parquet",
             "stage3": out / "stage3.parquet"}
    for name, df in (("persons", persons), ("items", items), ("stage3", s3)):
        write_parquet(df, paths[name])
    outputs = {f"{t}_{ext}": str(out / "tables" / f"{t}.{ext}") for t in TABLES for ext in ("csv", "md")}
    outputs.update({f: str(out / f"{f}.png") for f in FIGURES})
    built = write_tables(str(paths["stage3"]), str(paths["persons"]), str(paths["items"]), outputs, prices or {},
                         None, method=method, eps=eps, base_models=[])
    for f in FIGURES:
        if f in built:
            write_csv(built[f].table, out / f"{f}_points.csv")
    return {"examinees": len(persons), "items": len(items), "converged": converged,
            "examinees_stage3": int(s3["examinee"].nunique())}
