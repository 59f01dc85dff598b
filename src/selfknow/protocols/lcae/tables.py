"""The LCAE paper's tables (Tables I-III, item fit) and Figure 2, from the stage outputs."""
from __future__ import annotations

import numpy as np
import pandas as pd

from selfknow.stats.hypothesis import friedman, mean_ci, pairwise_wilcoxon_holm
from selfknow.stats.item_fit import band_counts
from selfknow.stats.lcae import cost_efficiency
from selfknow.report.findings import Claim
from selfknow.stats.rasch import EXTREME_SCORE_ADJUSTMENT
from selfknow.report.tables import Built

from .catalog import TABLES

CONDITION_LABELS = {"baseline": "Baseline", "ids": "IDS", "dpr": "DPR", "ids_dpr": "IDS+DPR"}
#: Table III's columns in the paper's order ("baseline, DPR, IDS, and DPR with IDS", §IV)
TABLE3_COLUMNS = {"baseline": "Baseline", "dpr": "DPR", "ids": "IDS", "ids_dpr": "DPR+IDS"}


#: the reference columns of Table I and its squared variant (`evaluate.reference_points`)
REFERENCE_LABELS = {"const": "constant 0.5", "floor": "floor (ĉ = e)"}
Z95 = 1.959963984540054


def per_condition_table(stage3: pd.DataFrame, value: str) -> Built:
    """Tables I (value="lcae"; "lcae_squared" for its squared-error variant) and II
    (value="theta"): per examinee, the mean over repeats in
    each condition; a summary row (mean over examinees); the Friedman test across conditions
    (blocks = examinees) and pairwise Wilcoxon signed-rank tests with Holm correction. Where
    Stage 3 has an LCAE's reference points (`evaluate.reference_points`), Table I also gives
    each examinee's constant-0.5 and floor LCAE and the conditions in which it beats the
    constant with a 95 % interval (over items) that excludes no gain. The tests and reference
    points are the paragraphs of its notes."""
    # one row order whatever the records' order, so that means are equal to the last bit
    stage3 = stage3.sort_values(["examinee", "condition", "repeat"], kind="stable")
    conds = [c for c in CONDITION_LABELS if c in set(stage3["condition"])]
    wide = (stage3.groupby(["examinee", "condition"])[value].mean().unstack("condition")[conds])
    table = wide.rename(columns=CONDITION_LABELS).reset_index()
    mean_row = {"examinee": "mean", **{CONDITION_LABELS[c]: float(wide[c].mean()) for c in conds}}
    notes = []
    refs = [k for k in REFERENCE_LABELS if f"{value}_{k}" in stage3.columns]
    if refs:
        per_ex = stage3.groupby("examinee")
        for k in refs:
            col = per_ex[f"{value}_{k}"].mean().reindex(wide.index)
            table[REFERENCE_LABELS[k]] = col.to_numpy()
            mean_row[REFERENCE_LABELS[k]] = float(col.mean())
        beats = beats_constant(stage3, value, conds)
        table["beats 0.5 in"] = [", ".join(CONDITION_LABELS[c] for c in beats.get(ex, [])) or "none"
                                 for ex in wide.index]
        n_beat = {c: sum(c in v for v in beats.values()) for c in conds}
        notes.append(f"Reference points: stating 0.5 for every item scores the 'constant 0.5' column "
                     f"({'ln 2 = 0.693' if value == 'lcae' else 'mean (e − 0.5)²'}); stating the reference "
                     f"e itself scores the floor ({'the mean binary entropy of e' if value == 'lcae' else '0'}), "
                     f"the least any assessment can. 'beats 0.5 in': the conditions in which the examinee's "
                     f"LCAE is below the constant's with a 95 % interval over items (normal, per-item "
                     f"differences, repeats averaged) that lies wholly below it. Examinees that do: "
                     + ", ".join(f"{CONDITION_LABELS[c]} {n_beat[c]} of {len(wide)}" for c in conds) + ".")
    table = pd.concat([table, pd.DataFrame([mean_row])], ignore_index=True)
    complete = wide.dropna()
    if len(complete) >= 2 and len(conds) >= 3:
        fr = friedman(complete.to_numpy())
        if np.isnan(fr.statistic):  # scipy's tie correction divides by zero
            notes.append(f"Friedman test undefined: every examinee's value is the same in all {len(conds)} "
                         f"conditions (n = {fr.n_blocks} examinees), so there is no difference to rank. "
                         f"No pairwise Wilcoxon tests either: every paired difference is zero, so they "
                         f"have nothing to test (a p-value of 1 would read as a measured null).")
        else:
            notes.append(f"Friedman χ²({fr.df}) = {fr.statistic:.2f}, p = {fr.pvalue:.3g} "
                         f"(n = {fr.n_blocks} examinees).")
            pw = pairwise_wilcoxon_holm(complete.to_numpy(), [CONDITION_LABELS[c] for c in conds])
            notes.append("Pairwise Wilcoxon signed-rank, Holm-adjusted p: " + "; ".join(
                f"{r['a']} vs {r['b']}: {r['p_holm']:.3g}" for r in pw))
    return Built(table, tuple(notes))


def beats_constant(stage3: pd.DataFrame, value: str, conds: list[str]) -> dict[str, list[str]]:
    """Per examinee, the conditions whose mean gain over the constant 0.5 (over repeats) has a
    95 % normal interval above 0; a repeat's standard error is over items, and the repeats'
    mean takes their mean standard error (repeats of one examinee are positively correlated,
    so this is not narrower than the true one)."""
    g = stage3.groupby(["examinee", "condition"])[[f"{value}_gain", f"{value}_gain_se"]].mean()
    out: dict[str, list[str]] = {}
    for (ex, cond), (gain, se) in g.iterrows():
        if cond in conds and np.isfinite(gain) and np.isfinite(se) and gain - Z95 * se > 0:
            out.setdefault(ex, []).append(cond)
    return {ex: [c for c in conds if c in v] for ex, v in out.items()}


def route_counts(stage3: pd.DataFrame) -> list[dict]:
    """Per routing condition: its assessments on the Slow route (`n_slow`) of `n`, its
    examinees, and in how many of them (`differ`; None without the plain condition) the final
    answers or assessments differ from its condition without routing."""
    out = []
    for cond, plain in (("dpr", "baseline"), ("ids_dpr", "ids")):
        d = stage3[stage3["condition"] == cond]
        if d.empty:
            continue
        row = {"condition": cond, "plain": plain, "n_slow": int(d["n_slow"].sum()), "n": int(d["n_items"].sum()),
               "examinees": int(d["examinee"].nunique()), "differ": None}
        p = stage3[stage3["condition"] == plain]
        if not p.empty:
            a = d.groupby("examinee")[["lcae", "theta"]].mean()
            b = p.groupby("examinee")[["lcae", "theta"]].mean().reindex(a.index)
            row["differ"] = int((~np.isclose(a.to_numpy(), b.to_numpy(), rtol=0, atol=1e-12)).any(axis=1).sum())
        out.append(row)
    return out


def routes_note(stage3: pd.DataFrame) -> str:
    """How many items each DPR route took, per routing condition, and in how many examinees a
    routing condition's final answers or assessments differ from its condition without routing."""
    parts = []
    for r in route_counts(stage3):
        text = (f"{CONDITION_LABELS[r['condition']]}: Slow on {r['n_slow']} and Fast on {r['n'] - r['n_slow']} "
                f"of {r['n']} assessments (items x repeats x {r['examinees']} examinees)")
        if r["differ"] is not None:
            text += f"; differs from {CONDITION_LABELS[r['plain']]} in {r['differ']} of {r['examinees']} examinees"
        parts.append(text)
    return ("DPR routes: " + "; ".join(parts) + ".") if parts else ""


def top_models_table(stage3: pd.DataFrame, k: int = 7) -> pd.DataFrame:
    """Table III: the top-k examinees by mean Stage-3 ability (over every condition and
    repeat; the paper says "ranked by ability" and reports Stage-3 abilities as the models'
    ability); mean LCAE over the repeats with a 95 % t-interval (the mean alone where the repeats
    agree: no interval), per condition, in the paper's column order (`TABLE3_COLUMNS`)."""
    from selfknow.report.tables import value_interval

    order = stage3.groupby("examinee")["theta"].mean().sort_values(ascending=False).index[:k]
    rows = []
    for ex in order:
        row = {"examinee": ex, "ability": float(stage3.loc[stage3.examinee == ex, "theta"].mean())}
        for c, label in TABLE3_COLUMNS.items():
            vals = stage3.loc[(stage3.examinee == ex) & (stage3.condition == c), "lcae"].to_numpy()
            if len(vals):
                row[label] = value_interval(*mean_ci(vals, 0.95))
        rows.append(row)
    return pd.DataFrame(rows)


def item_fit(items: pd.DataFrame) -> Built:
    """The item-fit table: infit/outfit MNSQ per item with its band, and the counts per band;
    the extreme items (answered right or wrong by every examinee) have no fit statistics and
    are counted on their own, so the counts add up to the number of items."""
    table = items[["item_id", "b", "se", "infit", "outfit", "band", "extreme"]].copy()
    counts = band_counts(items["infit"].to_numpy(), items["outfit"].to_numpy())
    n_extreme = int((items["extreme"] != "").sum())
    return Built(table, ("Items per band: " + ", ".join(f"{k}: {v}" for k, v in counts.items())
                         + f", extreme (all right or all wrong; no fit statistics, difficulty from the "
                           f"{EXTREME_SCORE_ADJUSTMENT} extreme-score adjustment): {n_extreme}; {len(items)} items "
                           f"in all.",))


def figure2_frame(stage3: pd.DataFrame, prices: dict[str, list[float]], condition: str = "ids_dpr") -> pd.DataFrame:
    """Per examinee in `condition` (Standard prompting: one per model and checkpoint): mean
    ability, mean LCAE and CE from the model's prices; `ability_lcae_ce`'s input, grouped by
    model and labelled by checkpoint."""
    d = stage3[stage3.condition == condition] if condition in set(stage3.condition) else stage3
    g = d.groupby(["model", "checkpoint"])[["theta", "lcae"]].mean().reset_index()
    g["ce"] = [cost_efficiency(*prices[m]) if m in prices else np.nan for m in g["model"]]
    return g.rename(columns={"model": "group", "checkpoint": "label"}).dropna(subset=["ce"])


def repeats_note(models: list[str], shared: list[str]) -> str:
    """Table III's note: which examinee models' repeats were one set of requests."""
    varied = [m for m in models if m not in shared]
    out = []
    if shared:
        out.append(f"Repeats were one set of requests, so their cells are single values without an interval, for: "
                   f"{', '.join(shared)} "
                   f"(deterministic: greedy local decoding, or log-likelihood assessments).")
    if varied:
        out.append(f"Repeats were separate requests, each its own answer, for: {', '.join(varied)}.")
    return " ".join(out)


def replies_note(persons: pd.DataFrame, stage3: pd.DataFrame) -> str:
    """How many replies gave no answer: Stage-1 answers with no explicit final answer
    (unparsed) or cut at the token budget (truncated), scored wrong; Stage-2 self-assessments
    unparsed or truncated, left out of their examinee's LCAE."""
    n1 = int(persons["n_items"].sum())
    n2 = int(stage3["n_items"].sum())
    return (f"Stage 1: of {n1} answers ({len(persons)} examinees), {int(persons['n_unparsed'].sum())} gave no "
            f"explicit final answer (unparsed) and {int(persons['n_truncated'].sum())} were cut at the token "
            f"budget (truncated); both scored wrong. Stage 2: of {n2} self-assessments, "
            f"{int(stage3['n_unparsed'].sum())} unparsed and {int(stage3['n_truncated'].sum())} truncated, "
            f"left out of their examinee's mean LCAE.")


def bce_cost(eps: float, e: float = 0.5) -> float:
    """BCE of one item with reference `e` and a stated error probability of 0, clipped to `eps`."""
    return float(-(e * np.log(eps) + (1 - e) * np.log1p(-eps)))


#: how a base LM states its Stage-2 error probability, by `lcae.base_error_p`
BASE_ERROR_P = {
    "digits": "the expected digit 0-9 after 'Probability that this answer is wrong (0-9):' by likelihood / 9",
    "answer": "one minus their own option probability of their final answer",
    "calibrated": ("one minus their own option probability of their final answer through their own logistic "
                   "calibration map, fitted on their answers to lcae.calibration_items train-split items"),
}


def method_note(*, method: str, eps: float, base_models: list[str], base_error_p: str | None = None) -> str:
    """The choices the paper leaves open that every LCAE number rests on (docs/deviations.md,
    "Deviations from the papers")."""
    est = ("joint maximum likelihood with the (L-1)/L bias correction" if method == "jml"
           else "conditional maximum likelihood")
    out = [f"Rasch: {est} (lcae.rasch_method), mean difficulty 0 over the non-extreme items; an extreme item "
           f"gets the difficulty of a score {EXTREME_SCORE_ADJUSTMENT} from its extreme; abilities are anchored "
           f"WLE over the non-extreme items, in Stage 1 and Stage 3 alike. IDS shows IRT_ItemErrorP averaged "
           f"over every Stage-1 examinee (all models x strategies).",
           f"LCAE clips stated error probabilities to [ε, 1 − ε], ε = {eps:g} (lcae.lcae_eps): one item with "
           f"reference 0.5 stated as 0 costs {bce_cost(eps):.1f} (at ε = 1e-15: {bce_cost(1e-15):.1f}; "
           f"at 1e-3: {bce_cost(1e-3):.1f})."]
    if base_models:
        stated = (f"= {base_error_p}: {BASE_ERROR_P[base_error_p]}" if base_error_p else
                  "; " + "; ".join(f"{k}: {v}" for k, v in BASE_ERROR_P.items()))
        out.append(f"Base LMs ({', '.join(base_models)}) answer by option likelihood and state their error "
                   f"probability by lcae.base_error_p ({stated}), not in words; their DPR route follows "
                   f"lcae.base_slow_below (Slow where their own option probability of their answer is below it; 0: "
                   f"the likelihoods of the words Fast and Slow).")
    return " ".join(out)


# The builders of the catalog's tables, from what `write_tables` knows by name; `fit_notes` are
# the paragraphs on the replies and on the Rasch fit.
def table1(stage3: pd.DataFrame, modes_note: str, fit_notes: tuple[str, ...]) -> Built:
    b = per_condition_table(stage3, "lcae")
    return Built(b.table, (*b.notes, routes_note(stage3) if "n_slow" in stage3.columns else "", modes_note,
                           *fit_notes))


def table1_squared(stage3: pd.DataFrame, fit_notes: tuple[str, ...]) -> Built:
    b = per_condition_table(stage3, "lcae_squared")
    return Built(b.table, (*b.notes, *fit_notes))


def table2(stage3: pd.DataFrame, fit_notes: tuple[str, ...]) -> Built:
    b = per_condition_table(stage3, "theta")
    return Built(b.table, (*b.notes, *fit_notes))


def table3(stage3: pd.DataFrame, shared_repeats: list[str] | None, modes_note: str,
           fit_notes: tuple[str, ...]) -> Built:
    repeats = "" if shared_repeats is None else repeats_note(sorted(stage3["model"].unique()), shared_repeats)
    return Built(top_models_table(stage3), (repeats, modes_note, *fit_notes))


#: what the paper states of each condition against Baseline (LCAE difference, condition minus
#: Baseline: below 0 is a reduction), §V
BASELINE_CLAIMS = {
    "ids": Claim(-1, "\"Introducing IDS consistently reduces LCAE across models relative to their respective "
                     "baselines\" (§V, Table III)"),
    "dpr": Claim(0, "\"IDS+DPR significantly reduces LCAE compared to the baseline, whereas DPR alone shows no "
                    "significant effect\" (§V, Table I)"),
    "ids_dpr": Claim(-1, "\"IDS+DPR significantly reduces LCAE compared to the baseline\" (§V, Table I)"),
}
#: the paper has no constant reference: its LCAEs (1.058 to 5.870, §V) are all above ln 2
CONSTANT_CLAIM = Claim(None, "none: the paper compares no assessment with stating 0.5; its reported LCAEs "
                             "(1.058 to 5.870, §V) all lie above ln 2 = 0.693")


def findings(stage3: pd.DataFrame) -> Built:
    """What the default finds on LCAE (`selfknow.report.findings`): each condition's LCAE
    against the constant 0.5 (constant minus LCAE, above 0 where the assessment beats it) and
    each condition other than Baseline against Baseline (condition minus Baseline, paired by
    examinee). A difference is the mean over examinees of each examinee's mean over repeats; its
    interval is the Student-t interval over the examinees (the paper's blocks, §V)."""
    from selfknow.report.findings import LEVEL, frame, row, tally_note

    s = stage3.sort_values(["examinee", "condition", "repeat"], kind="stable")
    conds = [c for c in CONDITION_LABELS if c in set(s["condition"])]
    per_ex = s.groupby(["examinee", "condition"])[["lcae", "lcae_gain"]].mean()
    lcae_w, gain_w = per_ex["lcae"].unstack("condition"), per_ex["lcae_gain"].unstack("condition")
    rows = []
    for c in conds:
        m, lo, hi = mean_ci(gain_w[c].dropna().to_numpy(), LEVEL)
        rows.append(row(f"{CONDITION_LABELS[c]} vs constant 0.5 (ln 2 − LCAE)", m, lo, hi, CONSTANT_CLAIM))
    for c in conds:
        if c == "baseline" or "baseline" not in conds:
            continue
        m, lo, hi = mean_ci((lcae_w[c] - lcae_w["baseline"]).dropna().to_numpy(), LEVEL)
        rows.append(row(f"{CONDITION_LABELS[c]} − Baseline (LCAE)", m, lo, hi, BASELINE_CLAIMS[c]))
    table = frame(rows)
    n = len(lcae_w)
    return Built(table, (tally_note(table), f"Intervals: Student-t over the {n} Stage-2 examinees (each examinee's "
                         f"LCAE averaged over its repeats), the paper's blocks (§V).", reversed_note(lcae_w, conds)))


def reversed_note(lcae_w: pd.DataFrame, conds: list[str]) -> str:
    """The examinees in which a condition the paper says lowers LCAE (`BASELINE_CLAIMS`
    direction -1) raises it instead, with both values (point values: means over repeats)."""
    parts = []
    for c in conds:
        if c == "baseline" or "baseline" not in conds or BASELINE_CLAIMS[c].direction != -1:
            continue
        up = lcae_w.index[(lcae_w[c] > lcae_w["baseline"]).to_numpy()]
        if len(up):
            parts.append(f"{CONDITION_LABELS[c]} raises LCAE, the reverse of the paper, for {len(up)} of "
                         f"{len(lcae_w)} examinees: " + ", ".join(
                             f"{ex} ({lcae_w.at[ex, 'baseline']:.3f} -> {lcae_w.at[ex, c]:.3f})" for ex in up))
    return ("Per examinee (means over repeats, no interval): " + "; ".join(parts) + ".") if parts else ""


def figure2(stage3: pd.DataFrame, prices: dict[str, list[float]], png: str, title: str,
            provenance: dict | None) -> Built:
    """Figure 2 (`selfknow.report.figures.ability_lcae_ce`) drawn to `png` from its points
    (`figure2_frame`), which it returns."""
    from selfknow.report.figures import ability_lcae_ce

    points = figure2_frame(stage3, prices)
    ability_lcae_ce(points, png, title=title, provenance=provenance)
    return Built(points)


def write_tables(stage3_path: str, persons_path: str, items_path: str, outputs: dict[str, str],
                 prices: dict[str, list[float]], shared_repeats: list[str] | None, *, method: str, eps: float,
                 base_models: list[str], base_error_p: str | None = None, provenance: dict | None = None,
                 modes_note: str = "") -> dict[str, Built]:
    """Every LCAE target of the catalog (`catalog.TABLES`: each table's builder, title and
    notes) through the one driver (`selfknow.report.tables.write_entries`): `outputs` maps
    "<table>_csv"/"<table>_md" to paths and "<figure>" to the figure's PNG; without `prices`
    (records from elsewhere) the figure is skipped; `shared_repeats` names the examinee models
    whose Stage-2 repeats shared one set of requests (`jobs.stage2_repeats_shared`; None:
    unknown, no note), `base_models` those that answer by likelihood, and `base_error_p` how
    they state their error probability (None: unknown, every reading listed); `method` and `eps`
    are the config's Rasch estimator and BCE clip, stated in the notes; with `provenance`, every
    table and the figure get its sidecar; `modes_note` (selfknow.models.providers.modes_note)
    joins Tables I and III's notes. Returns what each entry built, by name."""
    from selfknow.records import read_parquet
    from selfknow.report.tables import write_entries

    s3 = read_parquet(stage3_path)
    fit_notes = (replies_note(read_parquet(persons_path), s3),
                 method_note(method=method, eps=eps, base_models=base_models, base_error_p=base_error_p))
    known = {"stage3": s3, "items": read_parquet(items_path), "shared_repeats": shared_repeats,
             "modes_note": modes_note, "fit_notes": fit_notes, "prices": prices}
    return write_entries([t for t in TABLES if prices or not t.figure], known, outputs, provenance=provenance)
