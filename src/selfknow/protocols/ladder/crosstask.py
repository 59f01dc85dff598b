"""LADDER's cross-task priors (paper §E.1, Tables 14 and 15): does the L1 zero-shot prior carry
over to held-out subject sets and tasks?

Per answering model and suite (MMLU-Pro categories for Table 14, BBH tasks for Table 15):
`items_per_domain` questions of each category / task are answered and scored the way the
benchmark scores them, and the model (or, for a base LM, the configured prompted model, as for
L1) states its expected accuracy per category / task with the L1 prompt and JSON elicitation
(`prompted.zs_prior`). The table sets the prior against the accuracy, category by category,
with each model's CBF = 1 - mean |ZS_d - acc_d| (the paper: 15 questions x 10 categories / tasks).
Where the categories are LADDER's own domains (the offline analogues), the prior can instead be
read from the L1 prior the model already stated over all of LADDER's domains (`l1_prior`),
which costs no model call.

How an item is answered follows what it is and who answers:
* multiple choice (MMLU-Pro, the world's MCQ): a chat model reasons and ends with
  "The answer is (X)", read by MMLU-Pro's own extraction (`tasks.mmlu_pro.extract_answer`); a
  base LM answers by cloze scoring of the options (`answering.answer_by_cloze`).
* free form (BBH, the world's short answers): a chat model ends with "So the answer is ...",
  read by BBH's extraction (`tasks.bbh.extract_answer`: lm-eval's, or the lenient one with
  `bbh_lenient`); a base LM continues "Question: q\nAnswer:" and its first line is the answer.
  BBH compares with lm-eval's exact match (`tasks.bbh.matches`), the world with normalised
  exact match against the aliases (`stages.judge.exact_match`).
A response with no recoverable answer is kept with status "unparsed"; the table either drops it
from the category's denominator (the paper: Table 14 reports "unparsed/150" apart from the
accuracies) or counts it wrong (`unparsed`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.config import is_chat
from selfknow.records import read_parquet, write_parquet
from selfknow.report.tables import Built
from selfknow.stages.items import sample_items
from selfknow.stages.judge import exact_match
from selfknow.stages.mcq import cloze_prompt
from selfknow.stages.tasks import bbh, mmlu_pro

from .answering import answer_by_cloze, format_choices, load_prompt
from .catalog import CROSSTASK_ENTRIES
from .metrics import profile_metrics
from .prompted import MODEL_LEVEL, generate_texts, zs_prior

#: the suites (config `ladder.cross_task.suites`) and the paper table each reproduces
SUITES = {"mmlu_pro": "Table 14", "bbh": "Table 15"}
#: how the items of each dataset loader are answered and scored
MCQ_LOADERS = ("mmlu_pro", "world_mcq")
FREE_LOADERS = ("bbh", "world_qa", "world_qa_heldout")
ANSWER_COLUMNS = ["model", "suite", "item_id", "domain", "reference", "response", "parsed", "status",
                  "correct"]
UNPARSED = ("exclude", "wrong")
#: new tokens of a base LM's short answer (the world's answers are 1-3 words)
BASE_ANSWER_TOKENS = 16


def sample_suite(items: pd.DataFrame, domains: Sequence[str], n: int, seed: int, where: str) -> pd.DataFrame:
    """`n` items of each of `domains` (all of a domain's when it has fewer), seeded; raise naming
    `where` when a domain has no item."""
    missing = sorted(set(domains) - set(items["domain"].astype(str)))
    if missing:
        raise ValueError(f"{where}: no items of domain(s) {missing}; the items have "
                         f"{sorted(items['domain'].astype(str).unique())}")
    kept = items[items["domain"].astype(str).isin(set(domains))]
    return sample_items(kept, n, seed, stratify="domain")


def _free_correct(loader: str, domain: str, span: str, reference: str, aliases, bbh_lenient: bool) -> bool:
    if loader == "bbh":
        return bbh.matches(domain, span, reference, bbh_lenient)
    return exact_match(span, list(aliases))


def answer_suite(lm, items: pd.DataFrame, loader: str, *, chat: bool, max_new_tokens: int,
                 bbh_lenient: bool) -> pd.DataFrame:
    """Answer and score every item (see the module docstring): one row per item with the
    response, what was read from it (`parsed`, None when nothing), `status` ("ok" or
    "unparsed") and `correct`."""
    recs = items.to_dict("records")
    if loader in MCQ_LOADERS:
        if chat:
            t = load_prompt("crosstask_mcq")
            prompts = [t.substitute(question=r["question"], choices=format_choices(list(r["choices"]))) for r in recs]
            responses = generate_texts(lm, prompts, max_new_tokens, batch_size=8, chat=True)
            parsed = [mmlu_pro.extract_answer(x) for x in responses]
        else:
            ans = answer_by_cloze(lm, items)
            responses, parsed = list(ans["answer_raw"]), list(ans["answer"])
        correct = [p is not None and p == r["answer"] for p, r in zip(parsed, recs)]
    elif loader in FREE_LOADERS:
        if chat:
            t = load_prompt("crosstask_free")
            prompts = [t.substitute(question=r["question"]) for r in recs]
            responses = generate_texts(lm, prompts, max_new_tokens, batch_size=8, chat=True)
            parsed = [bbh.extract_answer(x, bbh_lenient) for x in responses]
        else:
            gens = lm.generate([cloze_prompt(str(r["question"])) for r in recs], max_new_tokens=BASE_ANSWER_TOKENS,
                               stop=["\n"], temperature=0.0)
            responses = [g.text for g in gens]
            parsed = [x.strip() or None for x in responses]
        correct = [p is not None and _free_correct(loader, str(r["domain"]), p, str(r["answer"]), r["aliases"],
                                                   bbh_lenient)
                   for p, r in zip(parsed, recs)]
    else:
        raise ValueError(f"cross-task suites take items of loaders {list(MCQ_LOADERS + FREE_LOADERS)}, "
                         f"not {loader!r}")
    return pd.DataFrame({"item_id": [str(r["item_id"]) for r in recs], "domain": [str(r["domain"]) for r in recs],
                         "reference": [str(r["answer"]) for r in recs], "response": responses, "parsed": parsed,
                         "status": ["ok" if p is not None else "unparsed" for p in parsed],
                         "correct": correct})


def l1_prior(profiles: pd.DataFrame, model: str, domains: Sequence[str], where: str) -> pd.DataFrame:
    """The L1 zero-shot prior that LADDER's prompted job stated for `model` (rows of
    prompted.PROFILE_COLUMNS with session_id "*"), restricted to `domains`; raise naming `where`
    when it has no value for one of them."""
    p = profiles[(profiles["method"] == "zs_prior") & (profiles["session_id"].astype(str) == MODEL_LEVEL)
                 & (profiles["model"] == model)]
    missing = sorted(set(domains) - set(p["domain"]))
    if missing:
        raise ValueError(f"{where}: the L1 prior of {model} has no domain(s) {missing}; prior 'l1' needs every "
                         "category / task to be a LADDER domain")
    return p[p["domain"].isin(set(domains))].reset_index(drop=True)


def crosstask_job(item_paths: Sequence[str], loader: str, spec: dict, prompt_spec: dict | None, out_answers: str,
                  out_prior: str, *, model: str, suite: str, domains: Sequence[str], items_per_domain: int,
                  seed: int, max_new_tokens: int, bbh_lenient: bool, prior_mode: str, prior_max_new_tokens: int,
                  l1_profiles: str | None = None, cache_dir: str | None) -> dict:
    """One model's answers to one suite (items sampled from the concatenated `item_paths`) and
    its zero-shot prior over the suite's `domains`, written to `out_answers` (ANSWER_COLUMNS) and
    `out_prior` (prompted.PROFILE_COLUMNS, session_id "*"). The prior is asked of
    `prompt_spec`'s model (the model itself when it is a chat model) with the L1 prompt, or,
    with `l1_profiles` (LADDER's prompted profiles of this model) instead, read from the L1
    prior it already stated."""
    from selfknow.models import load_lm

    if suite not in SUITES:
        raise ValueError(f"unknown cross-task suite {suite!r}; known: {list(SUITES)}")
    where = f"ladder.cross_task.suites.{suite}"
    items = pd.concat([read_parquet(p) for p in item_paths], ignore_index=True)
    pool = sample_suite(items, domains, items_per_domain, seed, where)
    lm = load_lm(spec, None, cache_dir=cache_dir)
    answers = answer_suite(lm, pool, loader, chat=is_chat(spec), max_new_tokens=max_new_tokens,
                           bbh_lenient=bbh_lenient)
    answers.insert(0, "suite", suite)
    answers.insert(0, "model", model)
    write_parquet(answers[ANSWER_COLUMNS], out_answers)
    calls, hits = lm.stats.misses, lm.stats.hits
    if l1_profiles is not None:
        prior = l1_prior(read_parquet(l1_profiles), model, domains, f"{where} ({l1_profiles})")
    else:
        plm = lm if prompt_spec["name"] == spec["name"] else load_lm(prompt_spec, None, cache_dir=cache_dir)
        prior = zs_prior(plm, list(domains), model=model, mode=prior_mode, max_new_tokens=prior_max_new_tokens,
                         chat=is_chat(prompt_spec))
        if plm is not lm:
            calls, hits = calls + plm.stats.misses, hits + plm.stats.hits
    write_parquet(prior, out_prior)
    return {"model": model, "suite": suite, "items": len(answers), "accuracy": round(float(answers["correct"].mean()), 4),
            "unparsed": int((answers["status"] == "unparsed").sum()), "prior_status": str(prior["parse_status"].iloc[0]),
            "model_calls": calls, "cache_hits": hits}


# ----------------------------------------------------------------------------- table
def domain_rows(answers: pd.DataFrame, prior: pd.DataFrame, unparsed: str) -> pd.DataFrame:
    """Per model and domain: items, unparsed, counted answers, accuracy (unparsed answers left
    out of the denominator, or counted wrong, by `unparsed`), the prior ZS and its error
    ZS - accuracy."""
    if unparsed not in UNPARSED:
        raise ValueError(f"unparsed must be one of {UNPARSED}, got {unparsed!r}")
    counted = (answers["status"] != "unparsed") if unparsed == "exclude" else pd.Series(True, index=answers.index)
    a = answers.assign(_unparsed=answers["status"] == "unparsed", _counted=counted,
                       _hit=counted & answers["correct"].astype(bool))
    out = a.groupby(["model", "domain"], sort=False).agg(
        n_items=("item_id", "size"), n_unparsed=("_unparsed", "sum"), n_counted=("_counted", "sum"),
        n_correct=("_hit", "sum")).reset_index()
    out["accuracy"] = out["n_correct"] / out["n_counted"].where(out["n_counted"] > 0)
    zs = prior[prior["session_id"].astype(str) == MODEL_LEVEL].set_index(["model", "domain"])["p_hat"]
    out["ZS"] = zs.reindex(pd.MultiIndex.from_frame(out[["model", "domain"]])).to_numpy(float)
    out["error"] = out["ZS"] - out["accuracy"]
    return out


def model_cbf(answers: pd.DataFrame, prior: pd.DataFrame, unparsed: str) -> pd.DataFrame:
    """Per model: CBF of its prior against the counted answers (`metrics.profile_metrics`:
    domains with at least 2 counted answers), signed bias, and the domains scored."""
    rows = []
    for model, g in answers.groupby("model", sort=False):
        if unparsed == "exclude":
            g = g[g["status"] != "unparsed"]
        p = prior[(prior["model"] == model) & (prior["session_id"].astype(str) == MODEL_LEVEL)]
        m = profile_metrics(dict(zip(p["domain"], p["p_hat"])), g["domain"].to_numpy(), g["correct"].to_numpy(bool))
        rows.append({"model": model, "CBF": m["CBF"], "bias": m["bias"], "n_domains": m["n_domains"]})
    return pd.DataFrame(rows, columns=["model", "CBF", "bias", "n_domains"])


def prior_table(answers: pd.DataFrame, prior: pd.DataFrame, domains: Sequence[str], unparsed: str,
                stated_by: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The paper's layout: one row per category / task (in `domains` order), then "mean",
    "unparsed" and "CBF"; per model the columns "<model> acc", "<model> ZS" and "<model> error"
    (ZS - acc). The "unparsed" row holds each model's count of unparsed answers and the "CBF"
    row its CBF, both in the acc column. A prior stated by another model (`stated_by`: a base
    LM's prompted model) is labelled "<model> ZS (by <other>)"."""
    stated_by = stated_by or {}
    rows = domain_rows(answers, prior, unparsed)
    cbf = model_cbf(answers, prior, unparsed).set_index("model")
    out = pd.DataFrame({"domain": list(domains) + ["mean", "unparsed", "CBF"]})
    for model in answers["model"].drop_duplicates():
        r = rows[rows["model"] == model].set_index("domain").reindex(list(domains))
        acc, zs, err = (r[c].to_numpy(float) for c in ("accuracy", "ZS", "error"))
        out[f"{model} acc"] = [*acc, np.nanmean(acc), float(r["n_unparsed"].sum()), cbf.loc[model, "CBF"]]
        who = stated_by.get(model, model)
        out[f"{model} ZS" + (f" (by {who})" if who != model else "")] = [*zs, np.nanmean(zs), np.nan, np.nan]
        out[f"{model} error"] = [*err, np.nanmean(err), np.nan, np.nan]
    return out


def suite_note(suite: str, loader: str) -> str:
    """What the items of `suite` are: the benchmark itself, or the mini world's analogue of it
    (`loader` is the suite's datasets' loader)."""
    if loader == suite:
        return {"mmlu_pro": "Items: MMLU-Pro (TIGER-Lab/MMLU-Pro test split), scored by its answer extraction.",
                "bbh": "Items: BIG-Bench Hard (one hub config per task), scored by the task's exact match."}[suite]
    if suite == "mmlu_pro":
        return ("Offline analogue of MMLU-Pro's categories: the mini world's 4-option MCQ questions of the listed "
                "domains from the train split, which LADDER's session pool never draws from; the base LMs answer "
                "by cloze scoring of the options. Unlike MMLU-Pro's, these questions are not new to the models: "
                "the world's curriculum practises multiple choice on train-split facts "
                "(`world.generator.mcq_practice_per_phase`), so accuracy here runs above the session pool's.")
    return ("Offline analogue of BBH's tasks: the mini world's free-form questions of the listed domains (each a "
            "family of templated questions) from the train split, answered by greedy generation and scored by "
            "exact match against the answer's aliases, as BBH scores by exact match.")


def suite_table(suite: str, suite_records: Mapping[str, tuple[pd.DataFrame, pd.DataFrame]],
                suites: Mapping[str, dict], loaders: Mapping[str, str], unparsed: str, prior: str,
                stated_by: Mapping[str, str]) -> Built:
    """The table of `suite` (`prior_table`) from its answers and priors (`suite_records[suite]`);
    its note says what its items are (`suite_note` of `loaders[suite]`), how the prior was
    stated (`prior`: "ask" or "l1") and gives the mean CBF over models."""
    a, p = suite_records[suite]
    table = prior_table(a, p, list(suites[suite]["domains"]), unparsed, stated_by)
    cbf = model_cbf(a, p, unparsed)
    mean = float(cbf["CBF"].mean())
    unit = "category" if suite == "mmlu_pro" else "task"
    counted = ("unparsed answers left out of the denominator" if unparsed == "exclude"
               else "unparsed answers counted wrong")
    per = int(a.groupby(["model", "domain"]).size().max())
    asked = ("asked with the L1 prompt over these rows" if prior == "ask" else
             "read from the model's L1 prior over LADDER's domains (prior 'l1'), of which these rows are some")
    note = (f"{suite_note(suite, loaders[suite])} Per model: accuracy on {per} questions per {unit} ({counted}), the "
            f"zero-shot prior ZS {asked} (stated by the answering model if it is a chat model, else by the "
            "prompted model), error = ZS - acc; CBF = 1 - mean |ZS - acc| over the rows with at least 2 "
            f"counted answers. Mean CBF over the {len(cbf)} models: {mean:.3f}.")
    return Built(table, (note,), summary={f"mean_CBF_{suite}": round(mean, 4)})


def mmlu_pro_table(suite_records: Mapping, suites: Mapping, loaders: Mapping, unparsed: str, prior: str,
                   stated_by: Mapping) -> Built:
    """Table 14: `suite_table` of the MMLU-Pro suite."""
    return suite_table("mmlu_pro", suite_records, suites, loaders, unparsed, prior, stated_by)


def bbh_table(suite_records: Mapping, suites: Mapping, loaders: Mapping, unparsed: str, prior: str,
              stated_by: Mapping) -> Built:
    """Table 15: `suite_table` of the BBH suite."""
    return suite_table("bbh", suite_records, suites, loaders, unparsed, prior, stated_by)


def write_crosstask_tables(answers: Mapping[str, Sequence[str]], priors: Mapping[str, Sequence[str]],
                           suites: Mapping[str, dict], loaders: Mapping[str, str], unparsed: str,
                           outputs: Mapping[str, str], *, prior: str = "ask", provenance: dict | None = None,
                           stated_by: Mapping[str, str] | None = None) -> dict:
    """Read every model's answers and prior of each suite of `suites` and write the table of
    each (`catalog.CROSSTASK_ENTRIES` whose files `outputs` names, through
    `selfknow.report.tables.write_entries`) to `outputs["<name>_csv"]` / `outputs["<name>_md"]`;
    `stated_by` names who stated each model's prior (`prior_table`)."""
    from selfknow.report.tables import write_entries

    from .tables import summary

    read = {s: (pd.concat([read_parquet(p) for p in answers[s]], ignore_index=True),
                pd.concat([read_parquet(x) for x in priors[s]], ignore_index=True)) for s in suites}
    known = {"suite_records": read, "suites": suites, "loaders": loaders, "unparsed": unparsed, "prior": prior,
             "stated_by": stated_by or {}}
    entries = [t for t in CROSSTASK_ENTRIES if f"{t.name}_csv" in outputs]
    return summary(write_entries(entries, known, outputs, provenance=provenance))
