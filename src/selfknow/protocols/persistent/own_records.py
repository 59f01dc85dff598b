"""The persistent paper's evaluation on records a researcher already has (`selfknow
persistent-eval`, docs/own-results.md), and the workflow's own records exported in the same
plain format (`selfknow export-records`).

`persistent_eval` reads the records (`selfknow.readers`), evaluates every dataset with the
workflow's own `evaluate.evaluate` and renders the paper's table layouts with its own table
code (`tables.assemble`) through the one table driver (`report.tables.write_entries`, the
catalog's entries of `LAYOUTS`), and reliability diagrams (`report.reliability.reliability_grid`).
Every record is read, checked and evaluated before the first file is written; every file is
written atomically.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from selfknow.paths import fill
from selfknow.readers import read_records
from selfknow.readers.plain import COLUMNS
from selfknow.records import atomic_path, read_parquet, write_csv
from selfknow.report.tables import Built, bold_text
from selfknow.stats.persistent.contrast import METRICS

from . import catalog as C
from . import paths as PP
from .evaluate import Result, evaluate, record_arrays
from .metrics import reliability_frame
from .tables import (METRIC_LABELS, SHORT, Col, MetricFile, Row, assemble, chance_check,
                     contrast_size_table)

#: the catalog's tables written in their layout (a method table's columns and normalisation,
#: `catalog.MethodTable`; Table 8's contrast-set sizes), each with its title here: the rows are
#: the records' methods, one block per dataset
LAYOUTS = {
    "table1": "Table 1 layout: contrast-set and full-set calibration",
    "table11": "Table 11 layout: all ten metrics (Eq. 1 normalisation)",
    "table12": "Table 12 layout: all ten metrics, fitted Bradley-Terry normalisation (§B.1)",
    "table8": "Table 8 layout: contrast-set sizes per pair of evaluation checkpoints",
}
#: the builders of those tables, by layout
_BUILDERS = {C.MethodTable: "selfknow.protocols.persistent.own_records:records_method_table",
             C.ContrastTable: "selfknow.protocols.persistent.own_records:records_contrast_table"}
NOTES = ("Contrast sets: the questions one evaluation checkpoint answers right and the other wrong, for every "
         "pair of evaluation checkpoints (earlier first, in the records' order); contrast metrics average over "
         "the pairs of at least {min_contrast} questions ({pairs}). Full-set AUC and Brier pool the evaluation "
         "checkpoints' answers, SmoothECE is averaged over checkpoints; methods with several seeds average each "
         "metric over seeds. {bold} (a block: a dataset); underlined: not significantly worse on {n_boot} "
         "paired class-stratified bootstrap replicates (one-sided 95 %, §A.8); a method tied with the best is both. ")


@dataclass(frozen=True)
class Settings:
    """The evaluation's settings (config keys `persistent.min_contrast`,
    `bootstrap_replicates`, `bootstrap_ece_replicates`, `bootstrap_seed`,
    `confidence_clamp`, `bt_max_iter`)."""

    min_contrast: int
    n_boot: int
    n_boot_ece: int
    seed: int
    clamp: float | None
    bt_max_iter: int


def _slug(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "records"


def records_method_table(name: str, results: dict[str, Result], methods: dict[str, list[str]],
                         settings: Settings, label: str = "") -> Built:
    """The builder of a method table of `LAYOUTS` from the records' `results`: one block of rows
    per dataset (its `methods` in order), the columns of the catalog entry's layout; `label`
    prefixes the metric columns as the workflow's model name does ("wm-small Δ0b")."""
    layout = C.TABLE[name].layout
    # keys as the workflow's (model, dataset, evaluation set); the table notes name them
    key = {d: (label or "records", d or "all questions", d or "all questions") for d in results}
    files = {key[d]: MetricFile(r.points, r.replicates) for d, r in results.items()}
    cols = [Col(f"{label} {METRIC_LABELS[m]}".strip(), m) for m in (SHORT if layout.columns == "wide" else METRICS)]
    rows = [Row({**({"dataset": d} if d else {}), "method": C.METHOD[m].label if m in C.METHOD else m}, m, key[d], d)
            for d in results for m in methods[d]]
    values, marks = assemble(rows, cols, files, normaliser=layout.normaliser)
    pairs = ", ".join(f"{d + ': ' if d else ''}{len(r.pairs)} pairs" for d, r in results.items())
    notes = NOTES.format(min_contrast=settings.min_contrast, pairs=pairs, n_boot=settings.n_boot, bold=bold_text())
    return Built(values, (notes + chance_check(rows, cols, files, normaliser=layout.normaliser),), marks)


def records_contrast_table(results: dict[str, Result], settings: Settings) -> Built:
    """The builder of Table 8's layout from the records' `results`: the contrast-set sizes of
    each dataset (a dataset column where the records name datasets)."""
    sizes = pd.concat([contrast_size_table({d: r.contrast}, settings.min_contrast) for d, r in results.items()],
                      ignore_index=True).rename(columns={"model": "dataset"})
    if list(results) == [""]:
        sizes = sizes.drop(columns="dataset")
    return Built(sizes, ("Cell: contrast-set size (questions the row checkpoint gets wrong and the column checkpoint "
                         f"right); * = below the minimum size {settings.min_contrast}, not used.",))


def write_tables(results: dict[str, Result], methods: dict[str, list[str]], settings: Settings, label: str,
                 out: Path) -> list[str]:
    """Write the tables of `LAYOUTS` to `out` (`<name>.csv`, .md, .tex, .html) through the one
    driver, each the catalog's entry with its title and builder here; returns their names."""
    from selfknow.report.tables import write_entries

    known = {"results": results, "methods": methods, "settings": settings, "label": label}
    for name, title in LAYOUTS.items():
        entry = replace(C.TABLE[name], title=title, builder=_BUILDERS[type(C.TABLE[name].layout)])
        write_entries([entry], {**known, "name": name},
                      {f"{name}_csv": str(out / f"{name}.csv"), f"{name}_md": str(out / f"{name}.md")})
    return list(LAYOUTS)


def persistent_eval(path: str | Path, outdir: str | Path, settings: Settings, *, fmt: str = "auto",
                    label: str = "", progress: Callable[[str], None] | None = None,
                    read_options: dict | None = None) -> dict:
    """Evaluate the records at `path` (read by `read_records` in format `fmt` with
    `read_options`: methods, checkpoints, confidence_field and a reader's own) and write to
    `outdir`: `metrics.csv` (every point metric), `replicates.npz` (the bootstrap replicates,
    "<dataset>|<normaliser>|<method>|<metric>"), `contrast_sets.csv`, the tables of
    `write_tables` (CSV, Markdown, LaTeX, HTML) and `reliability[_<dataset>].png`. Returns a
    summary, with the reader's notes."""
    from selfknow.report.reliability import reliability_grid

    say = progress or (lambda message: None)
    t0 = time.perf_counter()
    records = read_records(path, fmt, **(read_options or {}))
    reader_notes = records.attrs["notes"]
    say(f"read {len(records)} records from {path}")
    by_dataset = record_arrays(records)
    single = {d: c.checkpoints[0] for d, c in by_dataset.items() if len(c.checkpoints) < 2}
    if single:
        d, c = next(iter(single.items()))
        raise ValueError(f"{records.attrs['source']}: the records{f' of dataset {d!r}' if d else ''} hold one "
                         f"evaluation checkpoint ({c!r}); the evaluation compares checkpoints (contrast sets of "
                         "pairs): give records of two or more, in training order (several runs in one file or log "
                         "directory, named and ordered with --checkpoints / checkpoints=)")
    results: dict[str, Result] = {}
    for d, conf in by_dataset.items():
        say(f"{d or 'records'}: {len(conf.checkpoints)} evaluation checkpoints x {conf.items.size} questions, "
            f"{len(conf.methods)} methods; metrics and {settings.n_boot} bootstrap replicates")
        results[d] = evaluate(conf, min_contrast=settings.min_contrast, n_boot=settings.n_boot,
                              n_boot_ece=settings.n_boot_ece, seed=settings.seed, clamp=settings.clamp,
                              bt_max_iter=settings.bt_max_iter)
        say(f"{d or 'records'}: {len(results[d].pairs)} contrast sets used "
            f"({time.perf_counter() - t0:.1f} s)")
    out = Path(outdir)
    points = pd.concat([r.points.assign(dataset=d) for d, r in results.items()], ignore_index=True)
    write_csv(points[["dataset", *[c for c in points.columns if c != "dataset"]]], out / "metrics.csv")
    with atomic_path(out / "replicates.npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **{f"{d}|{k}": v for d, r in results.items() for k, v in r.replicates.items()})
    write_csv(pd.concat([r.contrast.assign(dataset=d) for d, r in results.items()], ignore_index=True),
              out / "contrast_sets.csv")
    tables = write_tables(results, {d: list(c.methods) for d, c in by_dataset.items()}, settings, label, out)
    figures = []
    for d, conf in by_dataset.items():
        png = out / (f"reliability_{_slug(d)}.png" if d else "reliability.png")
        panels = {m: C.reliability_panels().get(m, m) for m in conf.methods}
        reliability_grid(reliability_frame(conf.correct, conf.methods, panels), png,
                         title=f"Reliability on the full set{f' ({d})' if d else ''}: answers of every evaluation "
                               "checkpoint, first seed", seed=settings.seed)
        figures.append(png.name)
    say(f"wrote {len(tables)} tables and {len(figures)} reliability diagrams to {out} "
        f"({time.perf_counter() - t0:.1f} s)")
    return {"records": len(records), "datasets": list(results), "tables": list(tables), "figures": figures,
            "notes": reader_notes}


def _record_paths(results: str | Path, evalset: str) -> list[Path]:
    paths = sorted(Path(results).glob(fill(PP.RECORDS, model="*", dataset="*", evalset=evalset)))
    if not paths:
        raise FileNotFoundError(f"{results}: no persistent records ({fill(PP.RECORDS, evalset=evalset)}); build the persistent tables first (a run from before "
                                "the metrics job wrote records: add --forcerun persistent_metrics)")
    return paths


def records_model(results: str | Path, model: str | None = None, evalset: str = "main") -> str:
    """The model whose records a results directory holds: `model` checked, or the only one."""
    models = sorted({p.parent.parent.name for p in _record_paths(results, evalset)})
    if model is None and len(models) > 1:
        raise ValueError(f"{results}: records of several models ({', '.join(models)}); name one")
    model = models[0] if model is None else model
    if model not in models:
        raise ValueError(f"{results}: no persistent records of model {model!r} (have {', '.join(models)})")
    return model


def export_records(results: str | Path, *, model: str | None = None, evalset: str = "main",
                   methods: Sequence[str] | None = None) -> pd.DataFrame:
    """The plain records a workflow run evaluated (`persistent/records/<model>/<dataset>/<evalset>.parquet`,
    written by the metrics job) for one model, every training dataset (the `dataset` column;
    sorted by name), the `methods` given in their order (default: all, as the workflow
    assembled them)."""
    paths = _record_paths(results, evalset)
    model = records_model(results, model, evalset)
    frames = []
    for p in paths:
        if p.parent.parent.name != model:
            continue
        df = read_parquet(p).assign(dataset=p.parent.name)
        if methods is not None:
            unknown = [m for m in methods if m not in set(df["method"])]
            if unknown:
                raise ValueError(f"{p}: no method {', '.join(map(repr, unknown))} "
                                 f"(have {', '.join(pd.unique(df['method']))})")
            df = pd.concat([df[df["method"] == m] for m in methods], ignore_index=True)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    return df[[c for c in COLUMNS if c in df.columns]]

