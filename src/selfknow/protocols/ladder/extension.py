"""LADDER's extension tasks (paper §3, §F.1-F.2, Table 32): GSM8K, HumanEval and BFCL
tool calling, each asked once per item in the paper's single-shot two-step protocol.

Step 1: the model answers the item (prompts/extension_<task>.txt); the answer is scored the
way the benchmark scores it (`selfknow.stages.tasks.score.score_item`: GSM8K's final number,
HumanEval's tests run in the sandbox, BFCL's calls compared by AST). Step 2: the model is shown
the item and its own answer and states its confidence that the answer is correct as a JSON
probability, {"confidence": p} (prompts/extension_confidence.txt; constrained to
CONFIDENCE_SCHEMA where the model entry has `structured_output` on); that is the *recorded
confidence*.

Per model and task (`table32`): the score over the fixed denominator (every asked item; an
answer that does not parse, a completion that crashes or hangs, scores as wrong, as in the
paper's archived per-item flags), the mean recorded confidence, and the gap = mean
(confidence - correct) over the items whose confidence reply held a number in [0, 100]
(positive: overconfident). A reply that states no confidence (no such JSON object, nor a bare
number) is recorded as missing, never filled: a task with no recorded confidence has no gap
(unavailable, unscored), not a gap of 0.
A row is scored for sign flips only when all three gaps are available; a gap within
`sign_tolerance_pp` of 0 counts as neither sign (the authors' plot_fig15_signflip.py).
"""
from __future__ import annotations

import json
import re
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.models.base import LM
from selfknow.records import read_parquet, write_parquet
from selfknow.stages.tasks.humaneval import CodeRun, fenced
from selfknow.stages.tasks.sandbox import isolation
from selfknow.stages.tasks.score import score_item

from .answering import _NUM, extract_json_object, load_prompt, parse_probability
from .catalog import EXTENSION_ENTRIES

TASKS = ("gsm8k", "humaneval", "bfcl")
#: the paper's column names (Table 32): HumanEval's score is pass@1 of one greedy completion
TASK_LABELS = {"gsm8k": "GSM8K", "humaneval": "HumanEval", "bfcl": "BFCL"}
RECORD_COLUMNS = ["model", "task", "dataset", "item_id", "response", "parsed", "correct", "detail", "fenced",
                  "confidence_response", "confidence"]
#: the step-2 reply's JSON schema (a probability, which the hf constraint supports)
CONFIDENCE_SCHEMA = {"type": "object", "properties": {"confidence": {"type": "number", "minimum": 0, "maximum": 1}},
                     "required": ["confidence"], "additionalProperties": False}
#: a free-text reply that is only a confidence: "85", "85%", "0.85", "Confidence: 85"
_BARE_CONFIDENCE = re.compile(rf"\s*(?:confidence\s*[:=]?\s*)?({_NUM})\s*(%?)\s*\.?\s*", re.IGNORECASE)


def answer_prompt(task: str, item: Mapping) -> str:
    """Step 1: the task's prompt for one item (BFCL's lists the function documents as JSON)."""
    fields = {"question": item["question"]}
    if task == "bfcl":
        fields["functions"] = json.dumps(json.loads(item["functions"]), indent=1)
    return load_prompt(f"extension_{task}").substitute(fields)


def confidence_prompt(task_prompt: str, answer: str) -> str:
    """Step 2: the item's prompt and the model's own answer, asking for its confidence."""
    return load_prompt("extension_confidence").substitute(task=task_prompt, answer=answer.strip())


def parse_confidence(reply: str) -> float | None:
    """The confidence of a step-2 reply as a probability: the "confidence" of its first JSON
    object, else the reply itself when it is only a number ("85", "85%", "0.85"; above 1 read
    as a percentage); None for any other reply (one repeating the answer "12" states no
    confidence of 0.12) and for a value outside [0, 1]."""
    obj = extract_json_object(reply)
    if obj is not None and "confidence" in obj:
        p = parse_probability(obj["confidence"])
    else:
        m = _BARE_CONFIDENCE.fullmatch(reply)
        p = parse_probability(m.group(1) + m.group(2)) if m else None
    return p if p is not None and 0.0 <= p <= 1.0 else None


def ask_task(lm: LM, task: str, items: pd.DataFrame, *, chat: bool, max_new_tokens: int,
             confidence_max_new_tokens: int, code: CodeRun) -> pd.DataFrame:
    """Both steps for every item of one task, scored (RECORD_COLUMNS but model and dataset;
    `fenced`: a HumanEval completion holding a markdown-fenced block)."""
    rows = items.to_dict("records")
    prompts = [answer_prompt(task, r) for r in rows]
    answers = [g.text for g in lm.generate(prompts, max_new_tokens=max_new_tokens, chat=chat, temperature=0.0)]
    replies = [g.text for g in lm.generate([confidence_prompt(p, a) for p, a in zip(prompts, answers)],
                                           max_new_tokens=confidence_max_new_tokens, chat=chat, temperature=0.0,
                                           json_schemas=[CONFIDENCE_SCHEMA] * len(prompts))]
    records = []
    for r, answer, reply in zip(rows, answers, replies):
        s = score_item(task, r, answer, code=code)
        conf = parse_confidence(reply)
        records.append({"task": task, "item_id": r["item_id"], "response": answer, "parsed": s.parsed,
                        "correct": bool(s.correct), "detail": s.detail,
                        "fenced": task == "humaneval" and fenced(answer), "confidence_response": reply,
                        "confidence": np.nan if conf is None else conf})
    return pd.DataFrame(records)


def extension_job(inputs: Mapping[str, str], spec: dict, out: str, *, model: str,
                  datasets: Mapping[str, str], n_items: Mapping[str, int | None],
                  max_new_tokens: Mapping[str, int], confidence_max_new_tokens: int, sandbox: Mapping,
                  unfence_humaneval: bool, seed: int, cache_dir: str | None = None) -> dict:
    """One answering model on the three tasks: `inputs[task]` is the task dataset's test
    items, of which `n_items[task]` are drawn with `seed` (None: all); `sandbox` holds the
    interpreter (`python`), `allow_unisolated` and the `Limits` fields. Writes RECORD_COLUMNS
    to `out`."""
    from selfknow.config import is_chat
    from selfknow.models import load_lm
    from selfknow.stages.items import sample_items

    code = CodeRun.from_config(sandbox, unfence_humaneval)
    lm = load_lm(spec, None, cache_dir=cache_dir)
    parts, summary = [], {}
    for task in TASKS:
        items = sample_items(read_parquet(inputs[task]), n_items[task], seed)
        if items.empty:
            raise ValueError(f"{inputs[task]}: no test items for the {task} task")
        rec = ask_task(lm, task, items, chat=is_chat(spec), max_new_tokens=max_new_tokens[task],
                       confidence_max_new_tokens=confidence_max_new_tokens, code=code)
        parts.append(rec.assign(model=model, dataset=datasets[task]))
        summary.update({f"{task}_items": len(rec), f"{task}_correct": int(rec["correct"].sum()),
                        f"{task}_confidence_recorded": int(rec["confidence"].notna().sum())})
    write_parquet(pd.concat(parts, ignore_index=True)[RECORD_COLUMNS], out)
    return {**summary, "sandbox": isolation(sandbox["python"]).describe(), "model_calls": lm.stats.misses,
            "cache_hits": lm.stats.hits}


def _sign(gap: float, tolerance: float) -> int:
    return 1 if gap > tolerance else (-1 if gap < -tolerance else 0)


def table32(records: pd.DataFrame, sign_tolerance_pp: float) -> pd.DataFrame:
    """Per model (rows in first-seen order) and task: n (the fixed denominator), score (%),
    n_confidence (items with a recorded confidence), confidence (mean recorded, %), gap (pp,
    empty when unavailable); then sign_flip: "yes" when the three gaps have opposite signs,
    "no" when not, empty when a gap is unavailable."""
    rows = []
    for model, m in records.groupby("model", sort=False):
        row = {"model": model}
        for task in TASKS:
            t = m[m["task"] == task]
            conf = t["confidence"].astype(float)
            have = conf.notna()
            row[f"{task}_n"] = len(t)
            row[f"{task}_score"] = 100.0 * t["correct"].mean() if len(t) else np.nan
            row[f"{task}_n_confidence"] = int(have.sum())
            row[f"{task}_confidence"] = 100.0 * conf[have].mean() if have.any() else np.nan
            row[f"{task}_gap"] = (100.0 * (conf[have] - t["correct"][have].astype(float)).mean()
                                  if have.any() else np.nan)
        gaps = [row[f"{task}_gap"] for task in TASKS]
        if any(np.isnan(g) for g in gaps):
            row["sign_flip"] = ""
        else:
            signs = {_sign(g, sign_tolerance_pp) for g in gaps}
            row["sign_flip"] = "yes" if {1, -1} <= signs else "no"
        rows.append(row)
    return pd.DataFrame(rows)


def parse_counts(records: pd.DataFrame, unfence_humaneval: bool) -> str:
    """The note's sentence on what could not be read: HumanEval completions in a markdown fence
    (and what was run of them) and unparsed GSM8K and BFCL answers, over all models."""
    he = records[records["task"] == "humaneval"]
    run = ("their fenced code was run (unfence_humaneval, a deviation from official scoring)" if unfence_humaneval
           else "run as written, as official HumanEval scoring does, so each fails")
    unparsed = ", ".join(f"{TASK_LABELS[t]} {int(records[records['task'] == t]['parsed'].isna().sum())} of "
                         f"{int((records['task'] == t).sum())}" for t in ("gsm8k", "bfcl"))
    return (f"HumanEval completions in a markdown fence: {int(he['fenced'].sum())} of {len(he)} ({run}). "
            f"Unparsed answers (scored wrong): {unparsed}.")


def unparsed_gap_note(records: pd.DataFrame) -> str:
    """The gaps that rest on unparsed answers (scored wrong, so the gap reads as
    overconfidence): per model and task with a parse step (GSM8K, BFCL), how many of the
    answers its gap is taken over were unparsed."""
    flagged = []
    for (model, task), t in records[records["task"].isin(("gsm8k", "bfcl"))].groupby(["model", "task"], sort=False):
        have = t["confidence"].astype(float).notna()
        n_bad = int(t.loc[have, "parsed"].isna().sum())
        if n_bad:
            flagged.append(f"{model} {TASK_LABELS[task]}: {n_bad} of {int(have.sum())}")
    if not flagged:
        return ""
    return ("FLAGGED, gaps resting on unparsed answers (scored wrong, so they read as overconfidence rather than "
            "measure it): " + "; ".join(flagged) + ".")


def table32_note(table: pd.DataFrame, datasets: Mapping[str, str], loaders: Mapping[str, str],
                 sign_tolerance_pp: float, counts: str) -> str:
    """The table note: definitions, the sign-flip count, which dataset each task column reads
    (for an offline analogue, the benchmark it stands for), and `counts` (`parse_counts`)."""
    from selfknow.stages.tasks.analogues import ANALOGUES

    scored = table["sign_flip"] != ""
    flips = int((table["sign_flip"] == "yes").sum())
    sources = "; ".join(f"{TASK_LABELS[t]}: {datasets[t]}"
                        + (f" ({ANALOGUES[t]})" if loaders[t] == f"synthetic_{t}" else "") for t in TASKS)
    return (f"Single-shot two-step protocol: the model answers each item, then states its confidence in that "
            f"answer (a JSON probability). score = correct / n over every asked item (unparsed answers and failed or hung "
            f"HumanEval completions count as wrong; HumanEval's score is pass@1 of one greedy completion); "
            f"confidence = mean recorded confidence; gap = mean (confidence - correct) in percentage points over "
            f"the n_confidence items whose reply stated a confidence (positive: overconfident). A task with "
            f"no recorded confidence has no gap (empty: unavailable, unscored). sign_flip: gaps of opposite sign "
            f"across the three tasks (within {sign_tolerance_pp:g} pp of 0: neither sign), scored only where all "
            f"three gaps are available: {flips} of {int(scored.sum())} rows with available gaps. {counts} "
            f"Items: {sources}.")


def table32_with_note(records: pd.DataFrame, datasets: Mapping[str, str], loaders: Mapping[str, str],
                      sign_tolerance_pp: float, unfence_humaneval: bool, modes_note: str) -> Built:
    """Table 32 (`table32`) of every model's extension `records`; its note, one paragraph:
    `table32_note`, `unparsed_gap_note` and `modes_note` (selfknow.models.providers.modes_note)."""
    # the rules read `TASKS` of this module when Snakemake parses them, and report.tables loads scipy
    from selfknow.report.tables import Built

    table = table32(records, sign_tolerance_pp)
    note = table32_note(table, datasets, loaders, sign_tolerance_pp, parse_counts(records, unfence_humaneval))
    return Built(table, (" ".join(filter(None, [note, unparsed_gap_note(records), modes_note])),),
                 summary={"models": len(table), "sign_flips": int((table["sign_flip"] == "yes").sum()),
                          "rows_scored": int((table["sign_flip"] != "").sum())})


def write_table32(record_paths: Sequence[str], outputs: Mapping[str, str], *, datasets: Mapping[str, str],
                  loaders: Mapping[str, str], sign_tolerance_pp: float, unfence_humaneval: bool,
                  provenance: dict | None = None, modes_note: str = "") -> dict:
    """Read every model's extension records and write Table 32 (`catalog.EXTENSION_ENTRIES`,
    through `selfknow.report.tables.write_entries`) to `outputs["table32_csv"]` /
    `outputs["table32_md"]`; `datasets` and `loaders` name each task's dataset and its loader,
    for the note, and `modes_note` ends it."""
    from selfknow.report.tables import write_entries

    from .tables import summary

    known = {"records": pd.concat([read_parquet(p) for p in record_paths], ignore_index=True),
             "datasets": datasets, "loaders": loaders, "sign_tolerance_pp": sign_tolerance_pp,
             "unfence_humaneval": unfence_humaneval, "modes_note": modes_note}
    return summary(write_entries(EXTENSION_ENTRIES, known, outputs, provenance=provenance))
