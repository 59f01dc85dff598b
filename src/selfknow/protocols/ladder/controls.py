"""LADDER controls and analyses on recorded sessions (SPEC §2 "Controls and analyses";
paper §4.2, §4.3, §E.1-§E.7, §E.10, §F.4).

All functions here are pure (frames and arrays in, frames out) and make no model call:

* label conditions of the matched-input control (§4.2, §E.5): the *observed* decoded labels,
  *corrected* labels (every decoded label replaced by the true outcome, missing stays
  missing) and *clean* labels (the true outcome on every turn);
* the noise x coverage grid (§E.7): from clean labels keep exactly round(coverage * n) turns
  labelled and flip exactly round(flip * kept) of them, both chosen uniformly per session;
* domain partitions (§E.6): a semantic partition into 4 categories and seeded random
  partitions with the same group sizes; estimators and targets then work on groups;
* prefix curves (§E.2-§E.4): estimators fitted on the first t turns of a session, scored
  against the full session's domain accuracies;
* held-out prediction (§F.4, §E.10): each domain's questions split in a train and a test
  half; profiles from train-half records predict test-half domain accuracy (MAE);
* R4 adaptive selection (§4.3, §E.10): ZS when its CBF beats NoMemory, else LSA.

Estimators are the package's (`estimators.fit_estimator`), fitted with `query=False` where
only the end-of-stream profile is scored, so the refit-heavy latent models stay cheap.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .estimators import Stream, fit_estimator, resolve
from .metrics import domain_accuracy, profile_metrics

#: the matched algorithmic estimators of the controls (paper §4.2: Global against Count,
#: Beta, DS, GLAD-style and EM-Joint on identical label streams)
MATCHED = ["Global", "Count", "Bayes-Domain", "Dawid-Skene", "GLAD", "EM-Joint"]
LABEL_CONDITIONS = ("observed", "corrected", "clean")

#: MMLU's own subject categories for the paper's 20 subjects (paper §B.2: 13 STEM, 4 Other,
#: 2 humanities, 1 social sciences).
MMLU_CATEGORIES: dict[str, tuple[str, ...]] = {
    "stem": ("abstract_algebra", "astronomy", "college_biology", "college_chemistry",
             "college_physics", "computer_security", "conceptual_physics",
             "electrical_engineering", "high_school_biology", "high_school_chemistry",
             "high_school_mathematics", "high_school_physics", "machine_learning"),
    "other": ("anatomy", "business_ethics", "clinical_knowledge", "global_facts"),
    "humanities": ("formal_logic", "moral_scenarios"),
    "social_sciences": ("econometrics",),
}
#: The mini world's 20 fields (selfknow.world.generator: domain "<prefix>_<field>") grouped by
#: subject matter into 4 categories of 5, the world's analogue of MMLU's categories.
WORLD_CATEGORIES: dict[str, tuple[str, ...]] = {
    "natural_science": ("astronomy", "botany", "chemistry", "oceanography", "zoology"),
    "applied_technical": ("architecture", "cuisine", "engineering", "medicine", "metallurgy"),
    "arts_humanities": ("literature", "music", "mythology", "painting", "philosophy"),
    "society": ("economics", "geography", "history", "linguistics", "sports"),
}


# ----------------------------------------------------------------------------- labels
def _with_labels(turns: pd.DataFrame, labels: np.ndarray) -> pd.DataFrame:
    """`turns` whose strict and uncertain-as-negative label streams are `labels`."""
    lab = np.asarray(labels, dtype=float)
    if lab.shape != (len(turns),):
        raise ValueError(f"labels: {lab.shape} for {len(turns)} turns")
    return turns.assign(label_strict=lab, label_uncertain_as_negative=lab, decoded_label=lab)


def clean_labels(turns: pd.DataFrame) -> np.ndarray:
    """The true outcome as the label of every turn (complete clean feedback)."""
    return turns["correct"].astype(bool).to_numpy().astype(float)


def corrected_labels(decoded_label: Iterable[float], correct: Iterable[bool]) -> np.ndarray:
    """Label correction: each decoded label (1/0) replaced by the true outcome; turns without
    a decoded label stay missing (paper §4.2)."""
    lab = np.asarray(list(decoded_label), dtype=float)
    y = np.asarray(list(correct), dtype=bool).astype(float)
    return np.where(np.isnan(lab), np.nan, y)


def noisy_labels(correct: Iterable[bool], flip: float, coverage: float,
                 rng: np.random.Generator) -> np.ndarray:
    """Clean labels thinned to `coverage` and corrupted at rate `flip` (paper §E.7).

    Exactly round(coverage * n) turns keep a label (chosen uniformly without replacement),
    and exactly round(flip * kept) of those are flipped; the rest are NaN."""
    if not 0.0 <= flip <= 1.0 or not 0.0 <= coverage <= 1.0:
        raise ValueError(f"flip={flip}, coverage={coverage}: both must lie in [0, 1]")
    y = np.asarray(list(correct), dtype=bool).astype(float)
    n = y.size
    keep = rng.permutation(n)[:int(round(coverage * n))]
    out = np.full(n, np.nan)
    out[keep] = y[keep]
    flipped = keep[rng.permutation(keep.size)[:int(round(flip * keep.size))]]
    out[flipped] = 1.0 - out[flipped]
    return out


def label_condition(turns: pd.DataFrame, condition: str) -> pd.DataFrame:
    """`turns` (already decoded: `decoded_label`) with the labels of a matched-input
    condition: observed, corrected or clean."""
    if condition == "observed":
        return _with_labels(turns, turns["decoded_label"].astype(float).to_numpy())
    if condition == "corrected":
        return _with_labels(turns, corrected_labels(turns["decoded_label"], turns["correct"]))
    if condition == "clean":
        return _with_labels(turns, clean_labels(turns))
    raise ValueError(f"unknown label condition {condition!r}; expected {LABEL_CONDITIONS}")


# ----------------------------------------------------------------------------- scoring
def _session_groups(turns: pd.DataFrame):
    df = turns.assign(_sid=turns["session_id"].astype(str))
    key = df["_sid"].str.zfill(int(df["_sid"].str.len().max() or 1))
    df = df.assign(_k=key).sort_values(["model", "_k", "turn"], kind="stable")
    for (model, _), g in df.groupby(["model", "_k"], sort=False):
        yield str(model), str(g["_sid"].iloc[0]), g.drop(columns=["_sid", "_k"])


def profile_scores(turns: pd.DataFrame, estimators: Sequence[str], *, pooled: bool = False,
                   target: pd.DataFrame | None = None) -> pd.DataFrame:
    """Profile metrics (CBF, norm_CBF, bias, shape_error, kendall_tau, n_domains) of each
    estimator fitted on each session of `turns` (or on each model's pooled records when
    `pooled`), labels as carried by `turns` (label_strict / decoded_label).

    target: records whose domain accuracies are the target (default: the same records), e.g.
    the full session for a prefix or the test half for held-out prediction; matched by model
    (and session unless pooled). Rows: model, session_id ("*" when pooled), estimator, ..."""
    names = [resolve(e) for e in estimators]
    rows = []
    if pooled:
        groups = [(str(m), "*", g.sort_values(["session_id", "turn"], kind="stable"))
                  for m, g in turns.groupby("model", sort=False)]
    else:
        groups = list(_session_groups(turns))
    tgt_index = None
    if target is not None:
        tgt_index = {k: g for k, g in target.groupby(
            ["model"] if pooled else ["model", target["session_id"].astype(str)], sort=False)}
    for model, sid, g in groups:
        s = Stream.from_frame(g)
        if tgt_index is None:
            dom, y = s.domain, s.correct
        else:
            t = tgt_index.get(model if pooled else (model, sid))
            if t is None:
                continue
            dom, y = t["domain"].astype(str).to_numpy(), t["correct"].astype(bool).to_numpy()
        for est in names:
            out = fit_estimator(est, s, query=False)
            rows.append({"model": model, "session_id": sid, "estimator": est,
                         **profile_metrics(out.profile, dom, y),
                         "n_labels": float((~np.isnan(s.label)).sum())})
    return pd.DataFrame(rows)


def noise_grid(turns: pd.DataFrame, flips: Sequence[float], coverages: Sequence[float],
               estimators: Sequence[str] = MATCHED, *, repeats: int = 1,
               seed: int = 0) -> pd.DataFrame:
    """Session profile metrics of `estimators` for every (flip, coverage) cell of clean labels
    thinned and flipped by `noisy_labels` (paper §E.7). Each (repeat, cell, session) draws
    from its own seeded stream. Rows: flip, coverage, repeat + `profile_scores` columns."""
    out = []
    sessions = list(_session_groups(turns))
    for r in range(repeats):
        for i, f in enumerate(flips):
            for j, c in enumerate(coverages):
                parts = []
                for k, (_, _, g) in enumerate(sessions):
                    rng = np.random.default_rng([seed, r, i, j, k])
                    parts.append(_with_labels(g, noisy_labels(g["correct"], f, c, rng)))
                sc = profile_scores(pd.concat(parts, ignore_index=True), estimators)
                out.append(sc.assign(flip=float(f), coverage=float(c), repeat=r))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def prefix_curves(turns: pd.DataFrame, lengths: Sequence[int],
                  estimators: Sequence[str]) -> pd.DataFrame:
    """Profile metrics of estimators fitted on each session's first t turns (t in `lengths`)
    against the full session's domain accuracies (paper §E.3). Rows: prefix + columns of
    `profile_scores`."""
    out = []
    for t in lengths:
        pre = turns[turns["turn"].astype(int) <= int(t)]
        out.append(profile_scores(pre, estimators, target=turns).assign(prefix=int(t)))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


# ----------------------------------------------------------------------------- partitions
def semantic_partition(domains: Iterable[str],
                       categories: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """{domain: category}. With `categories` ({category: [domain, ...]}) that mapping;
    otherwise MMLU's categories when every domain is one of the paper's subjects, else the
    mini world's field categories (domain "<prefix>_<field>"). Raises naming every
    domain that no category covers."""
    doms = sorted(set(map(str, domains)))
    if categories is not None:
        table = {d: str(c) for c, ds in categories.items() for d in ds}
        mapping = {d: table[d] for d in doms if d in table}
    else:
        mmlu = {d: c for c, ds in MMLU_CATEGORIES.items() for d in ds}
        world = {f: c for c, fs in WORLD_CATEGORIES.items() for f in fs}
        if all(d in mmlu for d in doms):
            mapping = {d: mmlu[d] for d in doms}
        else:
            mapping = {d: world[d.rsplit("_", 1)[-1]] for d in doms
                       if d.rsplit("_", 1)[-1] in world}
    missing = [d for d in doms if d not in mapping]
    if missing:
        raise ValueError(f"semantic partition: no category for domains {missing}; "
                         "set ladder.partition in the config")
    return mapping


def random_partition(domains: Iterable[str], sizes: Sequence[int], seed: int) -> dict[str, str]:
    """{domain: "random_<k>"}: the sorted domains shuffled with `seed` and cut into groups of
    `sizes` (the semantic partition's sizes, so both partitions have equal granularity)."""
    doms = sorted(set(map(str, domains)))
    if sum(sizes) != len(doms):
        raise ValueError(f"random partition: group sizes {list(sizes)} do not sum to "
                         f"{len(doms)} domains")
    perm = np.random.default_rng(seed).permutation(len(doms))
    bounds = np.cumsum([0, *sizes])
    return {doms[p]: f"random_{k}" for k in range(len(sizes))
            for p in perm[bounds[k]:bounds[k + 1]]}


def apply_partition(turns: pd.DataFrame, mapping: Mapping[str, str]) -> pd.DataFrame:
    """`turns` with each domain replaced by its group."""
    unmapped = sorted(set(turns["domain"].astype(str)) - set(mapping))
    if unmapped:
        raise ValueError(f"partition maps no group for domains {unmapped}")
    return turns.assign(domain=turns["domain"].astype(str).map(mapping))


def partition_sizes(mapping: Mapping[str, str]) -> list[int]:
    return list(pd.Series(mapping).value_counts().sort_index())


# ----------------------------------------------------------------------------- held-out
def heldout_split(turns: pd.DataFrame, seed: int) -> np.ndarray:
    """Per turn, whether its question is in its domain's train half: each domain's distinct
    item ids (sorted) are shuffled with `seed` and the first ceil(n/2) are train (§F.4)."""
    pairs = turns[["item_id", "domain"]].astype(str).drop_duplicates()
    bad = pairs["item_id"].duplicated(keep=False)
    if bad.any():
        raise ValueError(f"item {pairs.loc[bad, 'item_id'].iloc[0]!r} appears in two domains")
    train: set[str] = set()
    for k, (d, g) in enumerate(sorted(pairs.groupby("domain"), key=lambda x: x[0])):
        ids = sorted(g["item_id"])
        perm = np.random.default_rng([seed, k]).permutation(len(ids))
        train.update(ids[i] for i in perm[:(len(ids) + 1) // 2])
    return turns["item_id"].astype(str).isin(train).to_numpy()


def domain_errors(profile: Mapping[str, float], domains, correct, min_count: int = 2) -> dict[str, float]:
    """|p̂_d − a_d| between a profile and the accuracy of every domain of (domains, correct)
    with >= `min_count` records (a domain missing from the profile counts 0.5)."""
    return {d: abs(profile.get(d, 0.5) - a) for d, (a, _) in domain_accuracy(domains, correct, min_count).items()}


def mean_error(errors: Mapping[str, float]) -> float:
    """The mean of per-domain absolute errors (`domain_errors`); NaN without a domain."""
    return float(np.mean(list(errors.values()))) if errors else float("nan")


def mae(profile: Mapping[str, float], domains, correct, min_count: int = 2) -> float:
    """Mean absolute error between a profile and the domain accuracies (`domain_errors`)."""
    return mean_error(domain_errors(profile, domains, correct, min_count))


# ----------------------------------------------------------------------------- R4
def r4_select(zs: float, nomem: float, lsa: float) -> tuple[str, float]:
    """R4 (paper §4.3): ZS when its score beats NoMemory's, else LSA. Scores are CBF-like
    (higher is better). Returns (chosen, its score)."""
    return ("ZS", float(zs)) if zs > nomem else ("LSA", float(lsa))


def r4_table(cbf: pd.DataFrame) -> pd.DataFrame:
    """R4 vs always-ZS vs best-of-two per model, from mean CBFs. `cbf`: model, NoMemory, ZS,
    LSA. best_of_two = max(ZS, LSA), an outcome-informed reference (§E.10). A final row
    "mean" averages over models and counts how often R4 chose ZS."""
    rows = []
    for r in cbf.itertuples(index=False):
        choice, val = r4_select(r.ZS, r.NoMemory, r.LSA)
        rows.append({"model": r.model, "NoMemory": r.NoMemory, "ZS": r.ZS, "LSA": r.LSA,
                     "R4_choice": choice, "R4": val, "always_ZS": r.ZS,
                     "best_of_two": max(r.ZS, r.LSA)})
    df = pd.DataFrame(rows)
    if len(df):
        num = ["NoMemory", "ZS", "LSA", "R4", "always_ZS", "best_of_two"]
        mean = {"model": "mean", **df[num].mean().to_dict(),
                "R4_choice": f"ZS on {int((df['R4_choice'] == 'ZS').sum())}/{len(df)}"}
        df = pd.concat([df, pd.DataFrame([mean])], ignore_index=True)
    return df
