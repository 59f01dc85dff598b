"""The persistent paper's tables from the metric files (Tables 1-4, 8-19), Table 7 from the SC tables,
and Figures 2-4 with their data tables.

Every method-comparison table is a list of rows (labels, method, the metric file it reads, a
mark group) and a list of columns (metric, and for the wide Tables 1-3 the model), both
derived from its entry in `catalog.TABLES` (`table_rows`); a cell is the point value of
`metrics_job`. Marks follow §A.8: within a mark group and a column the best
is bold, the methods not significantly worse on the paired bootstrap replicates underlined
(`stats.persistent.significance.significance_marks`). A column without replicates (the ECE
columns when `bootstrap_ece_replicates` is 0) gets the bold best only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.report.findings import signed
from selfknow.report.tables import Built, bold_text
from selfknow.stats.persistent.contrast import CHANCE, HIGHER_IS_BETTER, METRICS
from selfknow.stats.persistent.significance import percentile_interval

from . import catalog as C
from .catalog import GCM_METHODS
from .inputs import EvalFiles, Evaluation, MetricFiles, ScTable
from .variants import MAIN, TRANSFER

METRIC_LABELS = {"delta0_b": "Δ0b", "delta0": "Δ0", "delta_b": "Δb", "delta": "Δ",
                 "contrast_auc": "contrast AUC", "contrast_brier": "contrast BS", "contrast_ece": "contrast ECE",
                 "full_auc": "full AUC", "full_brier": "full BS", "full_ece": "full ECE"}
SHORT = ("delta0_b", "contrast_auc", "full_auc")  # the three columns of Tables 1-3

#: what a table note says of each GCM (`catalog.GCM_METHODS`)
GCM_NOTES = {
    "gcm": ("GCM: the TriviaQA GCM released by Xiao et al. (2026) on its backbone (`persistent.gcm_adapter`), "
            "P(\"yes\") after the model-agnostic prompt, no training (§3.1.1)."),
    "gcm_trained": ("GCM (trained here): not the paper's released GCM (`persistent.gcm_adapter` unset) but a "
                    "LoRA digit-confidence adapter we train per seed on the GCM backbone from the non-oracle "
                    "checkpoints' answers, with the model-agnostic prompt ending in a 0-9 instruction."),
}


@dataclass
class MetricFile:
    """One `metrics_job` output: point values and bootstrap replicates."""

    points: pd.DataFrame
    replicates: Mapping[str, np.ndarray]

    def point(self, method: str, metric: str, normaliser: str = "eq1") -> float:
        p = self.points
        v = p.loc[(p["normaliser"] == normaliser) & (p["method"] == method) & (p["metric"] == metric), "value"]
        if v.empty:
            raise KeyError(f"no {normaliser} value of {metric} for method {method!r}")
        return float(v.iloc[0])

    def reps(self, method: str, metric: str, normaliser: str = "eq1") -> np.ndarray | None:
        return self.replicates.get(f"{normaliser}|{method}|{metric}")

    def gcm(self) -> str:
        """Which of `GCM_METHODS` this file has (the config runs one)."""
        have = [m for m in GCM_METHODS if m in set(self.points["method"])]
        if len(have) != 1:
            raise KeyError(f"expected one GCM method of {GCM_METHODS} in the metrics, found {have}")
        return have[0]


@dataclass(frozen=True)
class Row:
    labels: dict            # leading label columns, e.g. {"dataset": ..., "method": ...}
    method: str
    key: tuple              # which MetricFile: (model, dataset, evalset)
    group: str              # mark group


@dataclass(frozen=True)
class Col:
    name: str
    metric: str
    model: str | None = None  # overrides the row key's model (wide tables)


def assemble(rows: Sequence[Row], cols: Sequence[Col], files: Mapping[tuple, MetricFile], *,
             normaliser: str = "eq1") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(values, marks) frames for `rows` x `cols` (label columns first)."""
    from selfknow.report import tables as R
    from selfknow.stats.persistent.significance import separated_bold, significance_marks

    def key_of(r: Row, c: Col) -> tuple:
        return (c.model, *r.key[1:]) if c.model else r.key

    label_cols = list(dict.fromkeys(k for r in rows for k in r.labels))
    values = pd.DataFrame([{**{k: r.labels.get(k, "") for k in label_cols},
                            **{c.name: files[key_of(r, c)].point(r.method, c.metric, normaliser) for c in cols}}
                           for r in rows])
    marks = pd.DataFrame("", index=values.index, columns=values.columns)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.group, []).append(i)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        for c in cols:
            point = {i: values.at[i, c.name] for i in idx}
            reps = {i: files[key_of(rows[i], c)].reps(rows[i].method, c.metric, normaliser) for i in idx}
            if any(v is None for v in reps.values()):
                finite = {i: v for i, v in point.items() if np.isfinite(v)}
                if finite and R.BOLD_RULE == "paper":
                    sign = 1 if HIGHER_IS_BETTER[c.metric] else -1
                    best = max(sign * v for v in finite.values())
                    for i, v in finite.items():
                        if abs(sign * v - best) <= 1e-5:
                            marks.at[i, c.name] = "best"
                continue
            m = significance_marks({str(i): point[i] for i in idx}, {str(i): reps[i] for i in idx},
                                   higher_is_better=HIGHER_IS_BETTER[c.metric])
            if R.BOLD_RULE == "separated":
                m = separated_bold(m, {str(i): reps[i] for i in idx}, CHANCE.get(c.metric))
            for i in idx:
                marks.at[i, c.name] = m[str(i)]
    return values, marks


#: two-sided level of the full-set AUC percentile interval the chance check reads
CHANCE_LEVEL = 0.95


def level_text(level: float) -> str:
    """A level as the notes print it: "95 %"."""
    return f"{level:.0%}".replace("%", " %")


def chance_check(rows: Sequence[Row], cols: Sequence[Col], files: Mapping[tuple, MetricFile], *,
                 normaliser: str = "eq1") -> str:
    """The table note's chance check: every (method, model, dataset) of the table whose full-set
    AUC `CHANCE_LEVEL` percentile interval over its bootstrap replicates (the paired replicates of
    `metrics_job`, §A.8) includes 0.5 or lies below it, whose AUC is undefined, or that has no
    replicates, is named with its AUC and interval, so that an estimator at chance is never read
    as a finding."""
    chance = CHANCE["full_auc"]
    seen, flagged, checked = set(), [], 0
    for r in rows:
        for c in cols:
            if c.metric != "full_auc":
                continue
            key = (c.model, *r.key[1:]) if c.model else r.key
            if (key, r.method) in seen:
                continue
            seen.add((key, r.method))
            model, dataset, evalset = key
            name = f"{r.method} ({model}, {dataset}{'' if evalset == dataset else f' → {evalset}'})"
            point = files[key].point(r.method, "full_auc", normaliser)
            reps = files[key].reps(r.method, "full_auc", normaliser)
            reps = None if reps is None else np.asarray(reps, dtype=float)
            checked += 1
            if reps is None:
                flagged.append(f"{name}: {point:.3f}, no bootstrap replicates")
            elif not np.isfinite(point) or not np.isfinite(reps).any():
                flagged.append(f"{name}: undefined")
            else:
                lo, hi = percentile_interval(reps, CHANCE_LEVEL)
                if lo <= chance:
                    where = "below chance" if hi < chance else f"includes {chance:g}"
                    flagged.append(f"{name}: {point:.3f} [{lo:.3f}, {hi:.3f}], {where}")
    level = level_text(CHANCE_LEVEL)
    if not flagged:
        return (f"Chance check: the {level} percentile bootstrap interval of full-set AUC excludes {chance:g} for all "
                f"{checked} (method, model, dataset) results.")
    return (f"Chance check: {len(flagged)} of the {checked} (method, model, dataset) results are not shown better "
            f"than chance on full-set AUC (point [{level} percentile bootstrap interval]); their other cells are no "
            "evidence of a working estimator: " + "; ".join(flagged) + ".")


def improvement_share(contrast: pd.DataFrame) -> tuple[int, int]:
    """(improvements, questions) over the used contrast sets of `contrast_size_frame`: each used
    pair once, earlier checkpoint first, an improvement being the later checkpoint right."""
    fwd = contrast[contrast["used"] & (contrast["row_index"] < contrast["col_index"])]
    return int(fwd["row_wrong_col_right"].sum()), int(fwd["size"].sum())


def oracle_check(files: Mapping[tuple, MetricFile], contrast: Mapping[tuple, pd.DataFrame]) -> str:
    """Table 1's note on its central claim (§4.1): oracle training above non-oracle training on
    contrast AUC. Per (model, dataset) the paired difference with its `CHANCE_LEVEL` percentile
    interval; where oracle is not shown above, the numbers that tell why: how many contrast
    questions are improvements (the later checkpoint right), what contrast AUC the end-correct
    baseline (confidence rising with the checkpoint, the same for every question) reaches on
    them, and the class-balanced Δ0b of both, which weighs improvements and regressions equally."""
    shown, explained = [], []
    for key, f in files.items():
        model, dataset, _ = key
        diff = f.point("oracle", "contrast_auc") - f.point("nonoracle", "contrast_auc")
        reps = [f.reps(m, "contrast_auc") for m in ("oracle", "nonoracle")]
        if any(r is None for r in reps):
            shown.append(f"{model}, {dataset}: {signed(diff)} (no replicates)")
            continue
        lo, hi = percentile_interval(np.asarray(reps[0]) - np.asarray(reps[1]), CHANCE_LEVEL)
        shown.append(f"{model}, {dataset}: {signed(diff)} [{signed(lo)}, {signed(hi)}]")
        if lo > 0:
            continue
        up, n = improvement_share(contrast[key])
        d0b = {m: f.point(m, "delta0_b") for m in ("nonoracle", "oracle")}
        explained.append(
            f"on {dataset} ({model}) {up} of the {n} contrast questions ({100 * up / max(n, 1):.0f} %) are improvements, so "
            f"contrast AUC rewards a confidence that rises with the checkpoint whatever the question: the "
            f"end-correct baseline reaches {f.point('end_correct', 'contrast_auc'):.3f} and Δ0b "
            f"{f.point('end_correct', 'delta0_b'):.3f}; the class-balanced Δ0b, which discounts that, is "
            f"{d0b['nonoracle']:.3f} (non-oracle) and {d0b['oracle']:.3f} (oracle)")
    level = level_text(CHANCE_LEVEL)
    text = (f" Oracle minus non-oracle training, contrast AUC [paired {level} percentile bootstrap interval]: "
            + "; ".join(shown) + ".")
    if explained:
        text += (" Where oracle training is not shown above non-oracle training (the paper's §4.1 finding), "
                 + "; ".join(explained) + ".")
    return text + (" The table's other headline comparisons (oracle training against SC and the end-correct "
                   "baseline, each method against chance), agreeing with the paper or not, are rows of "
                   "tables/persistent/findings.")


def _full_cols() -> list[Col]:
    return [Col(METRIC_LABELS[m], m) for m in METRICS]


def _wide_cols(models: Sequence[str]) -> list[Col]:
    return [Col(f"{model} {METRIC_LABELS[m]}", m, model) for model in models for m in SHORT]


def layout_datasets(which: str, datasets: Sequence[str], table: str) -> list[str]:
    """The training datasets a catalog layout's `datasets` ("first", "second", "each") picks."""
    if which == "each":
        return list(datasets)
    k = {"first": 0, "second": 1}[which]
    if len(datasets) <= k:
        raise ValueError(f"{table} needs a {which} persistent dataset")
    return [datasets[k]]


def table_rows(name: str, models: Sequence[str], datasets: Sequence[str], transfer: str,
               gcm_of: Callable[[tuple], str] | None = None) -> list[Row]:
    """The rows of the catalog's method table `name` (`catalog.MethodTable`) for these models
    and training datasets; `gcm_of(key)` names the GCM method of a metric file's key where a
    row says "{gcm}"."""
    t = C.TABLE[name].layout
    if not isinstance(t, C.MethodTable):
        raise ValueError(f"{name!r} is not a method-comparison table")
    ms = list(models[:1]) if t.models == "first" else list(models)
    ds = layout_datasets(t.datasets, datasets, name)

    def block(k: int, b: C.Block, m: str, d: str) -> list[Row]:
        key = (m, d, transfer if t.evalset == TRANSFER else d)
        shown = {"model": m, "dataset": d, "transfer": f"{d} → {transfer}"}
        labels = {**b.labels, **{c: shown[c] for c in t.label_columns}}
        gcm = gcm_of(key) if gcm_of and any("{gcm}" in C.row_method(r) for r in b.rows) else None
        return [Row({**labels, "method": label}, method, key, f"{m}|{d}|{k}")
                for method, label in (C.row_label(r, gcm) for r in b.rows)]

    if t.block_major:
        return [r for k, b in enumerate(t.blocks) for m in ms for d in ds for r in block(k, b, m, d)]
    return [r for m in ms for d in ds for k, b in enumerate(t.blocks) for r in block(k, b, m, d)]


def method_cells(name: str, files: Mapping[tuple, MetricFile], models: Sequence[str], datasets: Sequence[str],
                 transfer: str, seeds: Sequence[int] = ()) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(values, marks, notes) of a method-comparison table of the catalog from its loaded metric
    `files`, keyed by (model, training dataset, evaluation dataset); `seeds`, the adapter training
    seeds (config `persistent.seeds`), are named in the note."""
    t = C.TABLE[name].layout
    rows = table_rows(name, models, datasets, transfer, gcm_of=lambda key: files[key].gcm())
    cols = _wide_cols(models) if t.columns == "wide" else _full_cols()
    values, marks = assemble(rows, cols, files, normaliser=t.normaliser)
    notes = ("Contrast metrics: mean over the evaluation-checkpoint pairs whose contrast set reaches the "
             "minimum size; full-set AUC/BS pooled over evaluation checkpoints, ECE (SmoothECE) per "
             f"checkpoint then averaged; trained methods averaged over {_seed_phrase(seeds)}. {bold_text()}; "
             "underlined: not significantly worse (paired class-stratified bootstrap, one-sided 95 %, §A.8); "
             "a method tied with the best is both. "
             + chance_check(rows, cols, files, normaliser=t.normaliser))
    for g in GCM_METHODS:
        if any(r.method == g for r in rows):
            notes += " " + GCM_NOTES[g]
    return values, marks, notes


def _seed_phrase(seeds: Sequence[int]) -> str:
    if not seeds:
        return "seeds"
    return f"{len(seeds)} adapter seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, seeds))})"


def contrast_size_table(sizes: Mapping[str, pd.DataFrame], min_contrast: int) -> pd.DataFrame:
    """Tables 8-10: per model, a matrix over its evaluation checkpoints; cell "total (row wrong,
    column right)", with "*" when the set is below `min_contrast` and not used."""
    out = []
    for model, df in sizes.items():
        ck = list(dict.fromkeys(df.sort_values("row_index")["row"]))
        for a, ca in enumerate(ck):
            row = {"model": model, "checkpoint": f"#{a + 1} {ca}"}
            for b in range(len(ck)):
                if a == b:
                    row[f"#{b + 1}"] = "–"
                    continue
                r = df[(df["row_index"] == a) & (df["col_index"] == b)].iloc[0]
                row[f"#{b + 1}"] = f"{r['size']} ({r['row_wrong_col_right']})" + ("" if r["used"] else "*")
            out.append(row)
    return pd.DataFrame(out).fillna("")


def _transfer_cells(df: pd.DataFrame, order: Sequence[str], row_label):
    """(row, column, confidences, correctness) of each cell of a transfer matrix: adapter x the
    checkpoint whose own test answers it scores."""
    for a in dict.fromkeys(df["adapter"]):
        for c in order:
            g = df[(df["adapter"] == a) & (df["target"] == c) & (df["scorer"] == c)]
            yield row_label(a), c, g["confidence"].to_numpy(float), g["correct"].to_numpy(float)


_TRANSFER_PANELS = (("training checkpoint", lambda a: a),
                    ("training pair (second: random labels)", lambda a: a.replace("+", " + ") + " (random)"))


def transfer_matrices(transfer_conf: pd.DataFrame, random_conf: pd.DataFrame, order: Sequence[str], *,
                      n_boot: int = 0, seed: int = 0) -> tuple[pd.DataFrame, ...]:
    """Figure 3 data: full-set AUC of each adapter (rows: its training checkpoint(s)) on each
    checkpoint's own test answers (columns), the transfer and the random-label panel. With
    `n_boot`, also a boolean matrix per panel: the cell's percentile 95 % interval over `n_boot`
    resamples of the questions (`learning_check.bootstrap_auc`, `seed`) includes 0.5, or its
    AUC is undefined."""
    from selfknow.stats.classification import auc

    from .learning_check import bootstrap_auc

    values, chance = [], []
    for conf, (name, row_label) in zip((transfer_conf, random_conf), _TRANSFER_PANELS):
        rows = list(dict.fromkeys(row_label(a) for a in conf["adapter"]))
        m = pd.DataFrame(index=rows, columns=list(order), dtype=float)
        at = pd.DataFrame(True, index=rows, columns=list(order))
        for r, c, p, y in _transfer_cells(conf, order, row_label):
            m.loc[r, c] = auc(p, y)
            if n_boot and p.size:
                lo, hi = bootstrap_auc(p, y, n_boot, seed)
                at.loc[r, c] = not (lo > CHANCE["full_auc"] or hi < CHANCE["full_auc"])
        m.index.name, m.columns.name = name, "evaluation checkpoint"
        values.append(m)
        chance.append(at)
    return (*values, *chance) if n_boot else tuple(values)


#: decimals of Table 7's percentages (as the paper's: "31.6"); the CSV keeps full precision
PERCENT_DIGITS = 1


def accuracy_table(correct: Mapping[tuple[str, str, str], pd.Series], models: Sequence[str],
                   checkpoints: Mapping[str, Sequence[str]], n_train: int, datasets: Sequence[str]) -> pd.DataFrame:
    """Table 7 (§A.9): per model, one row per checkpoint in training order (the first `n_train`
    are its non-oracle training checkpoints, the rest its evaluation checkpoints) and one column
    per dataset: top-answer accuracy in %, the mean of `correct[(model, checkpoint, dataset)]`
    (one 0/1 entry per question)."""
    rows = []
    for m in models:
        for k, c in enumerate(checkpoints[m]):
            row = {"model": m, "checkpoint": c, "role": "non-oracle training" if k < n_train else "evaluation"}
            for d in datasets:
                y = correct[(m, c, d)].to_numpy(dtype=float)
                if y.size == 0:
                    raise ValueError(f"accuracy_table: no answers of {m} {c} on {d}")
                row[d] = 100.0 * float(y.mean())
            rows.append(row)
    return pd.DataFrame(rows)


def contrast_questions(correct: Mapping[str, pd.Series], eval_ckpts: Sequence[str], min_contrast: int
                       ) -> tuple[np.ndarray, int]:
    """The ids of the questions in at least one contrast set that reaches `min_contrast`
    questions (the pairs the contrast metrics average over), and how many such pairs there are.
    `correct[c]`: checkpoint c's 0/1 correctness indexed by item id; the questions are those
    every evaluation checkpoint answered, as in `jobs.assemble_methods`."""
    from selfknow.stats.persistent.contrast import contrast_pairs

    items = np.array(sorted(set.intersection(*(set(correct[c].index) for c in eval_ckpts))))
    y = np.stack([correct[c].groupby(level=0).first().reindex(items).to_numpy(dtype=float) for c in eval_ckpts])
    pairs = contrast_pairs(y, min_size=min_contrast)
    used = np.zeros(items.size, dtype=bool)
    for p in pairs:
        used[p.items] = True
    return items[used], len(pairs)


#: two-sided level of Figure 2's paired bootstrap interval on the AUC gap (the authors' 95 %)
GAP_LEVEL = 0.95


def gcm_headroom_row(metrics: MetricFile, eval_correct: Mapping[str, pd.Series], eval_ckpts: Sequence[str],
                     backbone_correct: pd.Series, min_contrast: int) -> dict:
    """One point of Figure 2 (§3.2, §B.4) for one (model, dataset): the GCM backbone's own
    top-answer error rate on the contrast questions (`contrast_questions`; `backbone_correct`
    indexed by item id), and the contrast-set AUC of oracle training minus that of the GCM with
    its `GAP_LEVEL` percentile interval over the paired bootstrap replicates of `metrics`
    (NaN without replicates), and the GCM's contrast-set AUC with its interval over its own
    replicates (`gcm_lo`, `gcm_hi`), which tells whether there is a working GCM to leave headroom.
    Without a contrast set of `min_contrast` questions the error rate is undefined (NaN), as are
    the contrast metrics."""
    ids, n_pairs = contrast_questions(eval_correct, eval_ckpts, min_contrast)
    backbone = backbone_correct.groupby(level=0).first()
    missing = pd.Index(ids).difference(backbone.index)
    if len(missing):
        raise KeyError(f"the GCM backbone has no answer to {len(missing)} contrast questions, e.g. {list(missing[:3])}")
    g = metrics.gcm()
    oracle, gcm = metrics.point("oracle", "contrast_auc"), metrics.point(g, "contrast_auc")
    ro, rg = metrics.reps("oracle", "contrast_auc"), metrics.reps(g, "contrast_auc")
    lo = hi = glo = ghi = np.nan
    if ro is not None and rg is not None:
        diff = np.asarray(ro, dtype=float) - np.asarray(rg, dtype=float)
        if np.isfinite(diff).any():
            lo, hi = percentile_interval(diff, GAP_LEVEL)
    if rg is not None and np.isfinite(np.asarray(rg, dtype=float)).any():
        glo, ghi = percentile_interval(np.asarray(rg, dtype=float), GAP_LEVEL)
    error = 1.0 - float(backbone.reindex(ids).to_numpy(dtype=float).mean()) if ids.size else np.nan
    return {"backbone_error_rate": error,
            "contrast_questions": int(ids.size), "pairs": n_pairs, "oracle_contrast_auc": oracle,
            "gcm_contrast_auc": gcm, "gcm_lo": glo, "gcm_hi": ghi, "auc_gap": oracle - gcm, "gap_lo": lo,
            "gap_hi": hi, "gcm_method": g}


# ----------------------------------------------------------------------------------------------
# files -> tables
# ----------------------------------------------------------------------------------------------
def metrics_paths(results: str, model: str, dataset: str, evalset: str) -> dict[str, str]:
    """Where `metrics_job` writes for (model, training dataset, evaluation set); evalset is
    "main" or "transfer"."""
    base = f"{results}/persistent/metrics/{model}/{dataset}/{evalset}"
    return {"metrics": f"{base}.parquet", "replicates": f"{base}.replicates.npz",
            "contrast": f"{results}/persistent/contrast/{model}/{dataset}/{evalset}.parquet"}


def load_metric_file(metrics: str, replicates: str) -> MetricFile:
    with np.load(replicates) as z:
        reps = {k: z[k] for k in z.files}
    return MetricFile(pd.read_parquet(metrics), reps)


def judge_note(counts: pd.DataFrame) -> str:
    """The table-note sentence on who labelled the answers (`jobs.judge_count_job` rows):
    exact match said as a deviation, or the LLM judge with its refused and unparsable
    judgments and its label counts."""
    if counts.empty:
        raise ValueError("judge_note: no judge counts")
    # a split without questions (BioASQ's train split) was labelled by no one
    judges = sorted(set(counts["judge"].dropna().astype(str)) - {""})
    if judges == ["exact match"]:
        return (" Correctness: normalised exact match with aliases (judge.correctness: exact), not the "
                "paper's LLM judge (§A.5).")
    t = counts[["questions", "refused", "unparsable", "no candidates", "candidates", "R", "W", "N",
                "unlabelled"]].sum()
    return (f" Correctness: LLM judge {', '.join(judges)} (§A.5, one request per question) on {t['questions']} "
            f"questions: {t['refused']} refused, {t['unparsable']} unparsable, {t['no candidates']} without a "
            f"candidate; of {t['candidates']} candidate answers {t['R']} R, {t['W']} W, {t['N']} N, "
            f"{t['unlabelled']} unlabelled (counted wrong, as N).")


def judged(files: Mapping[Evaluation, EvalFiles], keys: Sequence[tuple]) -> str:
    """`judge_note` over the judge counts of the evaluations `keys` (model, dataset, evalset)."""
    return judge_note(pd.concat([pd.read_csv(files[Evaluation(*k)].judge) for k in keys], ignore_index=True))


def load_evaluations(files: Mapping[Evaluation, EvalFiles], models: Sequence[str], datasets: Sequence[str],
                     transfer: str, evalset: str) -> dict[tuple, MetricFile]:
    """The metric files of every model and training dataset on `evalset`, keyed by (model,
    training dataset, evaluation dataset)."""
    out = {}
    for m in models:
        for d in datasets:
            f = files[Evaluation(m, d, evalset)]
            out[(m, d, transfer if evalset == TRANSFER else d)] = load_metric_file(f.metrics, f.replicates)
    return out


def method_table(name: str, files: Mapping[Evaluation, EvalFiles], models: Sequence[str], datasets: Sequence[str],
                 transfer: str, seeds: Sequence[int] = ()) -> Built:
    """The builder of a method-comparison table of the catalog (`catalog.MethodTable`): its
    cells and marks (`method_cells`) from the `metrics_job` outputs `files` of each evaluation,
    with Table 1's `oracle_check` where its layout asks and who labelled the answers."""
    layout = C.TABLE[name].layout
    loaded = load_evaluations(files, models, datasets, transfer, layout.evalset)
    values, marks, notes = method_cells(name, loaded, models, datasets, transfer, seeds)
    if layout.oracle_check:
        notes += oracle_check(loaded, {(m, d, d): pd.read_parquet(files[Evaluation(m, d, MAIN)].contrast)
                                       for m in models for d in datasets})
    notes += judged(files, [(m, d, layout.evalset) for m in models for d in datasets])
    return Built(values, (notes,), marks, summary={"rows": len(values),
                                                   "nan_cells": int(values.select_dtypes("number").isna().sum().sum())})


def contrast_table(name: str, files: Mapping[Evaluation, EvalFiles], models: Sequence[str],
                   datasets: Sequence[str], min_contrast: int, min_contrast_transfer: int) -> Built:
    """The builder of Tables 8-10 (`catalog.ContrastTable`): `contrast_size_table` of each
    model's contrast sets of the layout's training dataset on its evaluation set."""
    layout = C.TABLE[name].layout
    d = layout_datasets(layout.dataset, datasets, name)[0]
    mc = min_contrast_transfer if layout.evalset == TRANSFER else min_contrast
    sizes = {m: pd.read_parquet(files[Evaluation(m, d, layout.evalset)].contrast) for m in models}
    df = contrast_size_table(sizes, mc)
    n = int(next(iter(sizes.values()))["n_items"].iloc[0])
    notes = (f"Full-set size {n}. Cell: contrast-set size (questions the row checkpoint gets wrong and the column "
             f"checkpoint right); * = below the minimum size {mc}, not used."
             + judged(files, [(m, d, layout.evalset) for m in models]))
    unused = int(df.apply(lambda r: r.astype(str).str.endswith("*").sum(), axis=1).sum())
    return Built(df, (notes,), summary={"rows": len(df), "unused_pairs": unused})


def findings(name: str, files: Mapping[Evaluation, EvalFiles], models: Sequence[str], datasets: Sequence[str],
             transfer: str, transfer_confs: Mapping[str, str], order: Sequence[str], n_boot: int,
             seed: int) -> Built:
    """The builder of what the default finds (`catalog.FindingsTable`, `findings.findings_table`)
    from the metric files of its evaluation set and Figures 3-4's transfer confidences
    `transfer_confs` (training dataset -> path, first model) in checkpoint `order`, resampled
    `n_boot` times with `seed`."""
    from .findings import findings_table, transfer_asymmetry

    evalset = C.TABLE[name].layout.evalset
    asym = {d: (models[0], transfer_asymmetry(pd.read_parquet(p), order, n_boot, seed))
            for d, p in transfer_confs.items()}
    values, notes = findings_table(load_evaluations(files, models, datasets, transfer, evalset), asym)
    notes += judged(files, [(m, d, evalset) for m in models for d in datasets])
    return Built(values, (notes,), summary={"rows": len(values)})


def write_entry(name: str, builder: Callable, known: dict, csv: str, md: str, *, png: str | None = None,
                provenance: dict | None = None) -> dict:
    """Build and write the catalog's entry `name` through the one driver
    (`selfknow.report.tables.write_entries`): its builder takes what it names of `known`; the
    table goes to `csv` / `md`, a figure to `png`. Returns the builder's summary. `builder` is
    the function the entry names: the catalog assembles its references (`catalog._P`), so that
    a job reading the catalog for a layout does not reach every builder, and the job names its
    own here, which its code fingerprint then reaches (`selfknow.code_inputs`)."""
    from selfknow.report.tables import write_entries

    entry = C.TABLE[name]
    if entry.builder != f"{builder.__module__}:{builder.__name__}":
        raise ValueError(f"the persistent catalog's {name!r} names builder {entry.builder!r}, its job writes it "
                         f"with {builder.__module__}:{builder.__name__}")
    outputs = {f"{name}_csv": csv, f"{name}_md": md, **({name: png} if png else {})}
    return dict(write_entries([entry], known, outputs, provenance=provenance)[name].summary)


#: the builder of each layout of the tables `table_job` writes
LAYOUT_BUILDERS = {C.MethodTable: method_table, C.ContrastTable: contrast_table, C.FindingsTable: findings}


def title_fields(name: str, models: Sequence[str], datasets: Sequence[str], transfer: str) -> dict[str, str]:
    """What the title of a method or contrast table is formatted with: the first model, the
    training dataset its layout shows first (the transfer dataset for a contrast table of the
    transfer evaluation), the transfer dataset."""
    layout = C.TABLE[name].layout
    if isinstance(layout, C.FindingsTable):
        return {}
    if isinstance(layout, C.ContrastTable):
        shown = transfer if layout.evalset == TRANSFER else layout_datasets(layout.dataset, datasets, name)[0]
    else:
        shown = layout_datasets(layout.datasets, datasets, name)[0]
    return {"model": models[0], "dataset": shown, "transfer": transfer}


def table_job(name: str, files: Mapping[Evaluation, EvalFiles], models: Sequence[str], datasets: Sequence[str],
              transfer: str, csv: str, md: str, *, min_contrast: int, min_contrast_transfer: int,
              seeds: Sequence[int] = (), provenance: dict | None = None,
              transfer_confs: Mapping[str, str] | None = None, order: Sequence[str] = (), n_boot: int = 0,
              seed: int = 0) -> dict:
    """Write one method, contrast or findings table of the catalog (`catalog.TABLES`, its
    layout's builder `LAYOUT_BUILDERS`) from the `metrics_job` and `jobs.judge_count_job`
    outputs `files` of each evaluation; with `provenance`, its sidecar too
    (`selfknow.report.provenance`). The findings table also reads Figures 3-4's transfer
    confidences, `transfer_confs` (training dataset -> path, first model) in checkpoint `order`,
    resampled `n_boot` times with `seed`."""
    known = {"name": name, "files": files, "models": list(models), "datasets": list(datasets),
             "transfer": transfer, "min_contrast": min_contrast, "min_contrast_transfer": min_contrast_transfer,
             "seeds": seeds, "transfer_confs": transfer_confs or {}, "order": order, "n_boot": n_boot, "seed": seed,
             **title_fields(name, models, datasets, transfer)}
    return write_entry(name, LAYOUT_BUILDERS[type(C.TABLE[name].layout)], known, csv, md, provenance=provenance)


def transfer_figure(transfer_conf: str, random_conf: str, order: Sequence[str], png: str, title: str,
                    n_boot: int = 0, seed: int = 0, provenance: dict | None = None) -> Built:
    """The builder of Figure 3 (first training dataset) or Figure 4 (the second, §B.6): both
    panels, drawn to `png`, and its data as a table. With `n_boot`, cells whose bootstrap
    interval includes 0.5 (`transfer_matrices`) print in parentheses in the figure and are
    listed in the table's note."""
    from selfknow.report.figures import auc_limits, transfer_heatmap_random_label

    left, right, *chance = transfer_matrices(pd.read_parquet(transfer_conf), pd.read_parquet(random_conf), order,
                                             n_boot=n_boot, seed=seed)
    transfer_heatmap_random_label(left, right, png, title=title, at_chance=tuple(chance) or None,
                                  provenance=provenance)
    data = pd.concat([left.reset_index().rename(columns={left.index.name: "trained on"}).assign(panel="transfer"),
                      right.reset_index().rename(columns={right.index.name: "trained on"}).assign(panel="random labels")],
                     ignore_index=True)
    data = data[["panel", "trained on", *order]]
    seeds = ("The confidence tables hold one seed per adapter (the first variance seed for the transfer panel, the "
             "first training seed for the random-label one), so the cells are not averaged over seeds. ")
    lo, hi = auc_limits(left, right)
    notes = ("Full-set AUC of an adapter trained on the row's checkpoint(s) (single answer), evaluated on the column "
             "checkpoint's own test answers. " + seeds + f"Colour scale of both panels: {lo:.3f} to {hi:.3f}. ")
    summary = {"rows": len(data), "nan_cells": int(data[list(order)].isna().sum().sum())}
    if n_boot:
        at = [f"{panel} {r} on {c}" for panel, m in (("transfer:", chance[0]), ("random labels:", chance[1]))
              for r in m.index for c in m.columns if m.loc[r, c]]
        notes += (f"A cell's 95 % interval comes from {n_boot} resamples of the questions (seed {seed}); "
                  f"{len(at)} of {left.size + right.size} cells' intervals include {CHANCE['full_auc']:g} (in parentheses "
                  "in the figure)"
                  + (": " + "; ".join(at) + "." if at else "."))
        summary["cells_at_chance"] = len(at)
    return Built(data, (notes,), summary=summary)


def transfer_figure_job(name: str, transfer_conf: str, random_conf: str, order: Sequence[str], png: str, csv: str,
                        md: str, *, model: str, dataset: str, n_boot: int = 0, seed: int = 0,
                        provenance: dict | None = None) -> dict:
    """Write Figure 3 or 4 (`name`) of `model` trained on `dataset` and its data table
    (`transfer_figure`; with `provenance`, a sidecar beside each)."""
    known = {"transfer_conf": transfer_conf, "random_conf": random_conf, "order": order, "n_boot": n_boot,
             "seed": seed, "model": model, "dataset": dataset}
    return write_entry(name, transfer_figure, known, csv, md, png=png, provenance=provenance)


def _correct_by_item(paths: Sequence[str]) -> pd.Series:
    """The 0/1 correctness of one checkpoint's top answers, indexed by item id, over the SC
    tables `paths` (one per split)."""
    from .jobs import read_sc

    df = pd.concat([read_sc(p) for p in paths], ignore_index=True)
    return df.set_index("item_id")["correct"].astype(float)


def table7(sc_paths: Mapping[ScTable, str], models: Sequence[str], checkpoints: Mapping[str, Sequence[str]],
           n_train: int, datasets: Sequence[str], transfer: str) -> Built:
    """The builder of Table 7 from the SC tables `sc_paths` of every (model, checkpoint,
    dataset), their splits pooled (the training datasets' test split; both splits of the
    `transfer` dataset, which the transfer metrics pool)."""
    splits: dict[tuple[str, str, str], list[str]] = {}
    for k, path in sc_paths.items():
        splits.setdefault((k.model, k.checkpoint, k.dataset), []).append(path)
    correct = {k: _correct_by_item(v) for k, v in splits.items()}
    df = accuracy_table(correct, models, checkpoints, n_train, datasets)
    sizes = {d: sorted({int(correct[(m, c, d)].size) for m in models for c in checkpoints[m]}) for d in datasets}
    n = "; ".join(f"{d}: {', '.join(map(str, v))} questions" + (" (train and test splits)" if d == transfer else "")
                  for d, v in sizes.items())
    notes = ("Accuracy of the checkpoint's top self-consistency answer (the most probable group of equivalent "
             f"beams). {n}. The paper's column of training tokens is not given for the configured models and is "
             "left out.")
    return Built(df, (notes,), digits=PERCENT_DIGITS, summary={"rows": len(df)})


def table7_job(sc_paths: Mapping[ScTable, str], models: Sequence[str], checkpoints: Mapping[str, Sequence[str]],
               n_train: int, datasets: Sequence[str], csv: str, md: str, *, transfer: str,
               provenance: dict | None = None) -> dict:
    """Write Table 7 (`table7`; with `provenance`, its sidecar)."""
    known = {"sc_paths": sc_paths, "models": models, "checkpoints": checkpoints, "n_train": n_train,
             "datasets": datasets, "transfer": transfer}
    return write_entry("table7", table7, known, csv, md, provenance=provenance)


def gcm_chance_note(points: pd.DataFrame) -> str:
    """Figure 2's note on the points whose GCM is not shown above chance: its contrast-set AUC
    interval (`gcm_headroom_row`) includes 0.5 or lies below it, so the gap there is oracle
    training against a GCM at chance, not headroom a working GCM leaves."""
    chance = CHANCE["contrast_auc"]
    at = points[points["gcm_lo"] <= chance]
    if at.empty:
        return ""
    return (f"GCM not shown better than chance on contrast-set AUC (its {level_text(GAP_LEVEL)} percentile interval "
            f"includes {chance:g} or lies below it), so the gap there is oracle training against chance, not headroom "
            "left by a working GCM: " + "; ".join(
                f"{r.model}, {r.dataset}: {r.gcm_contrast_auc:.3f} [{r.gcm_lo:.3f}, {r.gcm_hi:.3f}]"
                for r in at.itertuples(index=False)) + ".")


def figure2(metric_paths: Mapping[Evaluation, MetricFiles], sc_paths: Mapping[ScTable, str], models: Sequence[str],
            eval_ckpts: Mapping[str, Sequence[str]], datasets: Sequence[str], min_contrast: int, backbone_model: str,
            backbone_ckpt: str, png: str, title: str, provenance: dict | None = None) -> Built:
    """The builder of Figure 2, drawn to `png`, and its data table: per (model, training dataset)
    `gcm_headroom_row` from the metric files of its main evaluation, the test SC tables of its
    evaluation checkpoints and of the GCM backbone (`backbone_ckpt` of `backbone_model`), all in
    `sc_paths`."""
    from selfknow.report.figures import gcm_headroom

    rows = []
    for d in datasets:
        bb = _correct_by_item([sc_paths[ScTable(backbone_model, backbone_ckpt, d, "test")]])
        for m in models:
            ev = list(eval_ckpts[m])
            correct = {c: _correct_by_item([sc_paths[ScTable(m, c, d, "test")]]) for c in ev}
            rows.append({"model": m, "dataset": d,
                         **gcm_headroom_row(load_metric_file(*metric_paths[Evaluation(m, d, MAIN)]), correct,
                                            ev, bb, min_contrast)})
    df = pd.DataFrame(rows)
    gcm_headroom(df, png, title=title, provenance=provenance)
    level = level_text(GAP_LEVEL)
    notes = (f"Backbone error rate: 1 − accuracy of {backbone_model} ({backbone_ckpt})'s own top answer on the "
             f"questions of the contrast sets of at least {min_contrast} questions. AUC gap: contrast-set AUC of "
             f"oracle training minus the GCM's (Table 17), with the {level} percentile interval of the paired "
             "bootstrap replicates (§A.8). "
             + " ".join([*(GCM_NOTES[g] for g in GCM_METHODS if g in set(df.get("gcm_method", []))),
                         gcm_chance_note(df)]).strip())
    return Built(df, (notes,), summary={"points": len(df),
                                        "nan_cells": int(df.select_dtypes("number").isna().sum().sum())})


def figure2_job(metric_paths: Mapping[Evaluation, MetricFiles], sc_paths: Mapping[ScTable, str],
                models: Sequence[str], eval_ckpts: Mapping[str, Sequence[str]], datasets: Sequence[str],
                png: str, csv: str, md: str, *, min_contrast: int, backbone_model: str, backbone_ckpt: str,
                provenance: dict | None = None) -> dict:
    """Write Figure 2 and its data table (`figure2`; with `provenance`, a sidecar beside each)."""
    known = {"metric_paths": metric_paths, "sc_paths": sc_paths, "models": models, "eval_ckpts": eval_ckpts,
             "datasets": datasets, "min_contrast": min_contrast, "backbone_model": backbone_model,
             "backbone_ckpt": backbone_ckpt}
    return write_entry("figure2", figure2, known, csv, md, png=png, provenance=provenance)


def table19(hidden_paths: Sequence[str]) -> Built:
    """The builder of Table 19 from the per-seed hidden-state files of the `transfer` variant."""
    from .variance import variance_correlation_table

    arrays, ckpts = [], None
    for p in hidden_paths:
        with np.load(p) as z:
            arrays.append(z["hidden"])
            c = list(z["checkpoints"])
        if ckpts is not None and c != ckpts:
            raise ValueError(f"{p}: checkpoints {c} differ from {ckpts}")
        ckpts = c
    df = variance_correlation_table(arrays)
    notes = (f"Per question and layer: Spearman ρ between checkpoint index ({', '.join(map(str, ckpts))}) and the "
             f"total variance of the last-token hidden state across {len(arrays)} adapter seeds; mean and median "
             "over questions (undefined ρ left out).")
    return Built(df, (notes,), summary={"layers": len(df), "seeds": len(arrays)})


def table19_job(hidden_paths: Sequence[str], csv: str, md: str, *, model: str, dataset: str,
                provenance: dict | None = None) -> dict:
    """Write Table 19 of `model` trained on `dataset` (`table19`; with `provenance`, its sidecar)."""
    return write_entry("table19", table19, {"hidden_paths": hidden_paths, "model": model, "dataset": dataset},
                       csv, md, provenance=provenance)
