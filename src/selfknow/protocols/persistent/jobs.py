"""Workflow jobs of the persistent-calibration protocol (SPEC §1): each reads its inputs,
computes, and writes its outputs atomically; each persistent rule's job (its param `job`,
run by `selfknow.runner`) is one of them or an adapter of `rule_jobs` that calls one.

- `sc_job`       beams (resumable) + self-consistency for one (model, checkpoint, dataset),
                 each of its splits; the candidates labelled by exact match, or left for
- `judge_job`    the LLM judge, a job of its own (no model of the beam search is loaded
                 while the judge's requests wait, e.g. for a Batch API job);
- `variant_job`  trains every adapter of one training variant and seed and scores every
                 (adapter, checkpoint, answers) pair the variant needs (`variants.plan_variant`);
- `variant_slice_job` a variant whose scorings the transfer variant already computes
                 (`variants.transfer_slices`), cut from its table instead of trained again;
- `gcm_job`      the external correctness model: trained once per (model, dataset, seed),
                 scores the evaluation checkpoints' answers (and the training ones', for
                 post-hoc isotonic calibration);
- `metrics_job`  every catalogued method's confidences (`metrics.assemble_methods`), contrast
                 sets, the ten metrics (Eq. 1 and the fitted §B.1 normalisation) and the
                 paired bootstrap replicates of §A.8 (`metrics.compute_metrics`).
- `reliability_job` the reliability diagrams (beyond the paper) of one (model, dataset):
                 one panel per method with a `panel` in `catalog.METHODS`, on the full test
                 set, with its SmoothECE curve and bootstrap band.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd
from huggingface_hub import snapshot_download

from selfknow.config import is_chat
from selfknow.models import free_memory, load_lm, resolve_checkpoint
from selfknow.models.hf import hub_resolution
from selfknow.records import atomic_path, read_parquet, write_csv, write_parquet
from selfknow.report.reliability import reliability_grid
from selfknow.resumable import map_chunks
from selfknow.stages.items import sample_items
from selfknow.stages.jobs import load_judge
from selfknow.stages.judge import exact_match, judge_candidates, judge_references
from selfknow.stats.smooth_ece import smooth_ece

from . import catalog as C
from . import variants as V
from .baselines import train_gcm
from .equivalence import get_equivalence, get_normaliser
from .evaluate import Confidences, evaluate, record_arrays, records_frame
from .inputs import ScInput
from .metrics import assemble_methods, reliability_frame
from .prompts import GCM_YES, qa_prompts, question_shots, released_gcm_prompt
from .self_consistency import self_consistency_frame
from .variance import adapter_hidden_states
from .verbalized import predict_confidence, randomise_labels, train_adapter, training_frame

log = logging.getLogger("selfknow.persistent")

SC_COLUMNS = ["item_id", "question", "prediction", "confidence", "correct", "group_answers",
              "group_probs", "group_members", "group_correct"]
#: an SC table before its candidates are labelled (`sc_job` under the LLM judge, `judge_job`'s input)
CANDIDATE_COLUMNS = [c for c in SC_COLUMNS if c not in ("correct", "group_correct")]
#: who labelled the candidates (`judge_sc`), for the judge counts of the table notes
JUDGE_COLUMNS = ["group_labels", "judge", "judge_status"]
CONF_COLUMNS = ["variant", "seed", "adapter", "scorer", "target", "dataset", "item_id", "answer",
                "correct", "confidence"]


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
#: NLI pairs per forward pass on a GPU: both directions of every pair of a question's 10
#: beams' answers (at most 2 x 45) in one batch
NLI_GPU_BATCH = 96


def side_device(spec: dict) -> str:
    """Where a job's auxiliary model (the NLI equivalence model) runs: the job's GPU when its
    model entry runs on CUDA and a GPU is visible, else the CPU."""
    dev = spec.get("device", "cpu")
    if dev == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    return "cuda" if dev == "auto" else dev


def make_equivalence(name: str, *, normalisation: str, num_threads: int = 1, device: str = "cpu"):
    """"normalised" -> the model-free matcher; "nli:<model id or path>" -> bidirectional NLI
    (batched: a question's pairs in one forward pass on a GPU); both compare answers after the
    `normalisation` of `equivalence.NORMALISERS` (config `persistent.answer_normalisation`)."""
    normalise = get_normaliser(normalisation)
    if name == "normalised":
        return get_equivalence("normalised", normalise=normalise)
    if name.startswith("nli:"):
        return get_equivalence("nli", model_name_or_path=name[4:], num_threads=num_threads, device=device,
                               batch_size=NLI_GPU_BATCH if device != "cpu" else 32, normalise=normalise)
    raise ValueError(f"persistent.equivalence must be 'normalised' or 'nli:<model>', got {name!r}")


def base_model_dir(spec: dict, checkpoint: str | None) -> str:
    """Local directory of a checkpoint's weights for LoRA training (which loads with
    `from_pretrained(dir)`): the checkpoint's `path`, else the hub revision downloaded to the
    Hugging Face cache (the cluster case)."""
    ck = resolve_checkpoint(spec, checkpoint)
    if ck.get("path"):
        return str(ck["path"])
    if spec.get("path") and not ck.get("revision"):
        return str(spec["path"])
    hub = spec.get("hub_id")
    if not hub:
        raise ValueError(f"model {spec['name']!r} checkpoint {ck['name']!r}: no local path and no hub_id")
    with hub_resolution(spec["name"], ck["name"], hub, ck.get("revision")):
        return snapshot_download(hub, revision=ck.get("revision"))


def _hparams(spec: dict, threads: int, extra: Mapping | None = None) -> dict:
    """`train_adapter`'s settings for a model entry's job: its device ("auto" resolved to the
    job's GPU or the CPU, as `side_device`), GPUs, dtype, and `extra` (config `persistent.adapter`, or
    `persistent.gcm_training` for the GCM)."""
    device = spec.get("device", "cpu")
    hp = {"num_threads": int(threads), "device": side_device(spec) if device == "auto" else device,
          "gpus": int(spec.get("gpu", 0))}
    if spec.get("dtype") in ("bfloat16", "float16", "float32"):
        hp["dtype"] = spec["dtype"]
    hp.update(extra or {})
    return hp


def read_sc(path: str | Path) -> pd.DataFrame:
    df = read_parquet(path)
    missing = [c for c in SC_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a self-consistency table (lacks {missing})")
    if df.empty:  # a split without questions stores no dtypes; concatenated splits need them
        df = df.astype({"correct": bool, "confidence": float})
    return df


def pooled_transfer(sc: Mapping[ScInput, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Checkpoint -> the transfer dataset's SC tables of `sc`, its splits concatenated in the
    order given (§A.3: the transfer evaluation pools both splits)."""
    frames: dict[str, list[pd.DataFrame]] = {}
    for k, d in sc.items():
        if k.dataset == V.TRANSFER:
            frames.setdefault(k.checkpoint, []).append(d)
    return {c: pd.concat(f, ignore_index=True) for c, f in frames.items()}


def training_examples(sc: pd.DataFrame, n_answers: int) -> pd.DataFrame:
    """One checkpoint's training examples (§3.1.1): its top `n_answers` candidate answers per
    question with their correctness, weighted by generation probability. A question none of
    whose beams is an answer gives none (the authors' `load_training_data` skips it), so an
    untrained checkpoint may give none at all (`train_adapter` then trains without it)."""
    rows = []
    for r in sc.itertuples(index=False):
        for a, p, c in list(zip(r.group_answers, r.group_probs, r.group_correct))[:n_answers]:
            rows.append((r.item_id, r.question, a, float(p), bool(c)))
    cand = pd.DataFrame(rows, columns=["item_id", "question", "answer", "probability", "correct"])
    return training_frame(cand, n_answers=n_answers)


# ----------------------------------------------------------------------------------------------
# self-consistency
# ----------------------------------------------------------------------------------------------
def judge_sc(sc: pd.DataFrame, items: pd.DataFrame, *, judge=None, chat: bool = False, labels: str = "generate",
             multi_reference: bool = False) -> pd.DataFrame:
    """Label every candidate group of a `self_consistency_frame` (persistent §3.1): add
    `group_labels` (R/W/N, None where the judge gave none), `group_correct` (label R),
    `correct` (the prediction's, i.e. its top group's), and per question `judge` and
    `judge_status` (`selfknow.stages.judge.Judgment`; "exact" for exact match, "no candidates" when
    every beam was empty).

    `judge` None: exact match with the item's aliases. Otherwise the LLM judge (an `LM`), one
    request per question with every group's representative numbered (`judge_candidates`,
    `chat` and `labels` as there; `multi_reference` as `judge_references`)."""
    by_id = items.set_index("item_id")
    out = sc.copy()
    if judge is None:
        out["group_labels"] = [["R" if exact_match(a, by_id.loc[i, "aliases"]) else "W" for a in answers]
                               for i, answers in zip(sc["item_id"], sc["group_answers"])]
        out["judge"] = "exact match"
        out["judge_status"] = "exact"
    else:
        asked = [k for k, answers in enumerate(sc["group_answers"]) if len(answers)]
        ids = [sc["item_id"].iloc[k] for k in asked]
        verdicts = judge_candidates(
            judge, [sc["question"].iloc[k] for k in asked],
            [judge_references(by_id.loc[i, "answer"], list(by_id.loc[i, "aliases"]), multi_reference=multi_reference)
             for i in ids],
            [list(sc["group_answers"].iloc[k]) for k in asked], chat=chat, labels=labels)
        found = dict(zip(asked, verdicts))
        out["group_labels"] = [list(found[k].labels) if k in found else [] for k in range(len(sc))]
        out["judge"] = judge.model_id
        out["judge_status"] = [found[k].status if k in found else "no candidates" for k in range(len(sc))]
    out["group_correct"] = [[lab == "R" for lab in g] for g in out["group_labels"]]
    out["correct"] = [bool(g[0]) if len(g) else False for g in out["group_correct"]]
    return out


def judge_counts(sc: pd.DataFrame) -> dict:
    """What labelled one SC table: the judge, questions per status, candidates per label
    (None counted as "unlabelled")."""
    labels = [lab for g in sc["group_labels"] for lab in g]
    status = sc["judge_status"].value_counts()
    return {"judge": str(sc["judge"].iloc[0]) if len(sc) else "", "questions": len(sc),
            **{s: int(status.get(s, 0)) for s in ("refused", "unparsable", "no candidates")},
            "candidates": len(labels), **{lab: sum(v == lab for v in labels) for lab in ("R", "W", "N")},
            "unlabelled": sum(v is None for v in labels)}


def judge_count_job(sc_paths: Mapping[ScInput, str], out: str) -> dict:
    """One row per SC table (its `ScInput` fields, then its `judge_counts`), for the table
    notes: every refused or unparsable judgment is counted there."""
    rows = []
    for key, path in sc_paths.items():
        sc = read_parquet(path)
        missing = [c for c in JUDGE_COLUMNS if c not in sc.columns]
        if missing:
            raise ValueError(f"{path}: SC table without its judge labels (lacks {missing}); rebuild it")
        rows.append({**key._asdict(), **judge_counts(sc)})
    df = pd.DataFrame(rows)
    write_csv(df, out)
    return {"tables": len(df), "refused": int(df["refused"].sum()), "unparsable": int(df["unparsable"].sum())}


#: the long beam table of `sc_job`: one row per beam
BEAM_TABLE = ["item_id", "question", "beam", "text", "logprob", "raw"]


class SplitIO(NamedTuple):
    """One split of an `sc_job`: its questions, how many to sample, the beam and SC tables."""
    items: str
    n_items: int
    beams_out: str
    sc_out: str


def sc_job(splits: Mapping[str, SplitIO], train_path: str, spec: dict, checkpoint: str, *, n_shots: int,
           icl_by_domain: bool, seed: int, num_beams: int, max_new_tokens: int, equivalence: str,
           normalisation: str, prompt_label: str, cache_dir: str, correctness: str, threads: int = 1) -> dict:
    """Beam search (`num_beams`, stop at the first newline) on a seeded sample of `n_items`
    questions of each split, resumable by chunks; then SC grouping (§3.1.1, §A.6). One job
    serves a checkpoint's splits of a dataset so the model loads once. The `n_shots`
    in-context examples come from the train items (`prompts.question_shots`; with
    `icl_by_domain`, those of each question's own domain, BioASQ's question type).
    `correctness` (config `judge.correctness`): "exact" labels every candidate group here
    (`judge_sc`, cheap) and writes the SC table; "llm" writes the unlabelled candidates
    (`CANDIDATE_COLUMNS`) for `judge_job`, so that no judge request is made while this job
    holds the model's GPU. Writes each split's long beam table and SC (or candidate) table;
    the summary's keys carry the split's name."""
    import torch

    if correctness not in ("exact", "llm"):
        raise ValueError(f"judge.correctness must be 'exact' or 'llm', got {correctness!r}")
    torch.set_num_threads(int(threads))
    t0 = time.time()
    train = read_parquet(train_path)
    lm = load_lm(spec, checkpoint, cache_dir=cache_dir)
    items, beams = {}, {}
    for split, io in splits.items():
        items[split] = sample_items(read_parquet(io.items), io.n_items, seed)
        shots = question_shots(train, items[split]["domain"], n_shots, seed, by_domain=icl_by_domain)

        def beams_for(chunk: pd.DataFrame, shots=shots) -> pd.DataFrame:
            prompts = qa_prompts(chunk["question"], chunk["domain"], shots, label=prompt_label)
            res = lm.beam_search(prompts, num_beams=num_beams, max_new_tokens=max_new_tokens, stop=("\n",))
            rows = [(i, q, b, beam.text, beam.logprob, beam.raw) for i, q, bs in zip(chunk["item_id"], chunk["question"], res)
                    for b, beam in enumerate(bs)]
            return pd.DataFrame(rows, columns=BEAM_TABLE)

        b = map_chunks(items[split], beams_for, io.beams_out, chunk_size=64, desc=f"beams {checkpoint} {split}",
                       params={"spec": spec, "ckpt": checkpoint, "shots": shots, "beams": num_beams,
                               "mnt": max_new_tokens, "label": prompt_label, "rules": "generate"}, model=lm.identity())
        # a split without questions (BioASQ has no train split): the table's columns
        beams[split] = pd.DataFrame(columns=BEAM_TABLE) if b.empty else b
    summary = {"beam_seconds": round(time.time() - t0, 1), "cache_hits": lm.stats.hits,
               "model_calls": lm.stats.misses}
    lm.release()  # done with it: its weights go before the NLI model's load
    equivalent = make_equivalence(equivalence, normalisation=normalisation, num_threads=threads,
                                  device=side_device(spec))
    for split, io in splits.items():
        sc = self_consistency_frame(beams[split], equivalent)
        tag = {"model": spec["name"], "checkpoint": checkpoint, "split": split}
        if correctness == "llm":
            write_parquet(sc[CANDIDATE_COLUMNS].assign(**tag), io.sc_out)
            summary.update({f"{split}_items": len(sc), f"{split}_mean_confidence": _mean(sc["confidence"])})
            continue
        sc = judge_sc(sc, items[split])[SC_COLUMNS + JUDGE_COLUMNS].assign(**tag)
        write_parquet(sc, io.sc_out)
        summary.update(_sc_summary(split, sc))
    return summary


def _mean(values) -> float:
    return round(float(np.mean(values)), 4) if len(values) else float("nan")


def _sc_summary(split: str, sc: pd.DataFrame) -> dict:
    counts = {k: v for k, v in judge_counts(sc).items() if k != "judge"}
    return {f"{split}_{k}": v for k, v in {"items": len(sc), "accuracy": _mean(sc["correct"]),
                                            "mean_confidence": _mean(sc["confidence"]), **counts}.items()}


class JudgeIO(NamedTuple):
    """One split of a `judge_job`: its questions (references), candidates in, SC table out."""
    items: str
    candidates: str
    sc_out: str


def judge_job(splits: Mapping[str, JudgeIO], model: str, checkpoint: str, judge: Mapping, cache_dir: str) -> dict:
    """The LLM judge's labels of every candidate group of one (model, checkpoint, dataset)'s
    splits (`judge_sc`; persistent §3.1, §A.5), read from `sc_job`'s candidate tables: the
    labelled SC tables the protocol's later rules read. `judge`: {"spec": the judge model's
    spec, "labels": "generate" | "constrained", "multi_reference": bool} (config `judge`).
    An API judge with `batch: true` sends every split's requests of one candidate count as
    one Batch API job and waits for it (a rerun resumes it: `selfknow.models.openai_batch`)."""
    judge_lm = load_judge(judge["spec"], cache_dir, judge["labels"])
    cands = {}
    for split, io in splits.items():
        cands[split] = read_parquet(io.candidates)
        missing = [c for c in CANDIDATE_COLUMNS if c not in cands[split].columns]
        if missing:
            raise ValueError(f"{io.candidates}: candidate table lacks {missing}; rebuild it")

    def label(split: str):
        return lambda: judge_sc(cands[split][CANDIDATE_COLUMNS], read_parquet(splits[split].items), judge=judge_lm,
                                chat=is_chat(judge["spec"]), labels=judge["labels"],
                                multi_reference=judge["multi_reference"])

    # both splits' requests together: a batched judge waits for one set of batch jobs
    summary = {}
    for split, sc in zip(splits, judge_lm.together([label(split) for split in splits])):
        sc = sc[SC_COLUMNS + JUDGE_COLUMNS].assign(model=model, checkpoint=checkpoint, split=split)
        write_parquet(sc, splits[split].sc_out)
        summary.update(_sc_summary(split, sc))
    summary.update({"judge_cache_hits": judge_lm.stats.hits, "judge_calls": judge_lm.stats.misses})
    judge_lm.release()
    return summary


# ----------------------------------------------------------------------------------------------
# LoRA variants
# ----------------------------------------------------------------------------------------------
def adapter_examples(plan: V.AdapterPlan, train_sc: Mapping[str, pd.DataFrame], spec: dict,
                     seed: int) -> dict[str, tuple[str, pd.DataFrame]]:
    """`train_adapter`'s input for one adapter plan: per view, its base weights and the
    training examples of its data checkpoints (several -> pooled, one source each; random
    labels where the plan says so, drawn with a seed derived from `seed` and the view)."""
    out = {}
    for k, view in enumerate(plan.views):
        parts = []
        for src in plan.data_for(view):
            if src not in train_sc:
                raise KeyError(f"adapter {plan.name!r}: no train-split answers of checkpoint {src!r}")
            parts.append(training_examples(train_sc[src], plan.n_answers).assign(source=src))
        df = pd.concat(parts, ignore_index=True)
        if view in plan.random_labels:
            df = randomise_labels(df, seed * 1000 + 17 + k)
        out[view] = (base_model_dir(spec, view), df)
    return out


def variant_job(variant: str, spec: dict, train_ckpts: Sequence[str], eval_ckpts: Sequence[str],
                sc_paths: Mapping[ScInput, str], adapters_dir: str, out: str | None, *, seed: int,
                cache_dir: str, threads: int = 1, pair_mode: str = "consecutive",
                hparams: Mapping | None = None, hidden_out: str | None = None,
                variance_items: int | str = "all") -> dict:
    """Train every adapter of `variant` (seed `seed`) and score every planned
    (adapter, scorer, target) triple; write the long confidence table (`CONF_COLUMNS`).

    `sc_paths`: the SC tables of the training dataset's train and test splits and, for the
    transfer scorings, of the transfer dataset (its splits pooled per checkpoint).
    With `hidden_out` (the `transfer` variant) also save, per checkpoint's own adapter, the
    hidden states on the first `variance_items` test questions (sorted ids; "all": every one)
    for Table 19.
    With `out` None nothing is scored (adapters and hidden states only).

    Memory: adapters train one after another (a multi-checkpoint one holds one base,
    `views.ViewWeights`); the scorings run grouped by scoring checkpoint, each loaded
    once with its adapters switched on it and released before the next one's."""
    import torch

    torch.set_num_threads(int(threads))
    with_transfer = any(k.dataset == V.TRANSFER for k in sc_paths)
    plan = V.plan_variant(variant, train_ckpts, eval_ckpts, with_transfer=with_transfer, pair_mode=pair_mode)
    sc = {k: read_sc(p) for k, p in sc_paths.items()}
    train_sc = {k.checkpoint: d for k, d in sc.items() if k.dataset == V.MAIN and k.split == "train"}
    test_sc = {k.checkpoint: d for k, d in sc.items() if k.dataset == V.MAIN and k.split == "test"}
    answers = {V.MAIN: test_sc, V.TRANSFER: pooled_transfer(sc)}
    hp = _hparams(spec, threads, hparams)
    t0 = time.time()
    adapter_dirs = {}
    for ap in plan.adapters:
        d = Path(adapters_dir) / ap.name.replace("+", "__")
        train_adapter(adapter_examples(ap, train_sc, spec, seed), d, seed, hp, log=log.info)
        free_memory()  # the training bases, before the next adapter's or the scorers' load
        adapter_dirs[ap.name] = str(d)
    t_train = time.time() - t0
    scorings = list(plan.scorings) if out is not None else []
    targets = []
    for s in scorings:
        tgt = answers[s.dataset].get(s.target)
        if tgt is None:
            raise KeyError(f"variant {variant}: no {s.dataset} test answers of checkpoint {s.target!r}")
        targets.append(tgt)
    frames: dict[int, pd.DataFrame] = {}
    calls = 0
    for scorer, by_adapter in _by_scorer_and_adapter(scorings).items():
        for adapter, idx in by_adapter.items():
            lm = load_lm(spec, scorer, cache_dir=cache_dir, adapter=adapter_dirs[adapter])
            for i in idx:
                s, tgt = scorings[i], targets[i]
                conf = predict_confidence(lm, tgt["question"].tolist(), tgt["prediction"].fillna("").tolist(),
                                          batch_size=32)
                frames[i] = pd.DataFrame({
                    "variant": variant, "seed": seed, "adapter": s.adapter, "scorer": s.scorer, "target": s.target,
                    "dataset": s.dataset, "item_id": tgt["item_id"].to_numpy(), "answer": tgt["prediction"].to_numpy(),
                    "correct": tgt["correct"].to_numpy(), "confidence": conf})
            calls += lm.stats.misses
            lm.unload_adapter()
        lm.release()
    df = (pd.concat([frames[i] for i in range(len(scorings))], ignore_index=True)[CONF_COLUMNS] if frames
          else pd.DataFrame(columns=CONF_COLUMNS))
    if out is not None:
        write_parquet(df, out)
    summary = {"adapters": len(plan.adapters), "scorings": len(frames), "rows": len(df),
               "train_seconds": round(t_train, 1), "score_seconds": round(time.time() - t0 - t_train, 1),
               "model_calls": calls}
    if hidden_out:
        summary["hidden_shape"] = str(save_hidden_states(plan, spec, test_sc, adapter_dirs, hidden_out,
                                                         variance_items, device=hp["device"]))
    return summary


def variant_slice_job(variant: str, train_ckpts: Sequence[str], eval_ckpts: Sequence[str], transfer_conf: str,
                      out: str) -> dict:
    """`variant`'s confidence table cut from the `transfer` variant's of the same seed: every
    scoring of `variant` has a twin there (`VariantPlan.twin_scorings`: an adapter trained
    on the same views, data and answers, read by the same scorer on the same answers), so
    the rows are the ones `variant_job` would compute, renamed to `variant`'s adapters."""
    plan = V.plan_variant(variant, train_ckpts, eval_ckpts)
    twins = plan.twin_scorings(V.plan_variant("transfer", train_ckpts, eval_ckpts))
    if twins is None:
        raise ValueError(f"variant {variant!r} has scorings the transfer variant lacks; it must be trained")
    conf = read_parquet(transfer_conf)
    rows = dict(tuple(conf.groupby(["adapter", "scorer", "target", "dataset"], sort=False)))
    parts = []
    for s in plan.scorings:
        t = twins[s]
        g = rows.get((t.adapter, t.scorer, t.target, t.dataset))
        if g is None:
            raise KeyError(f"{transfer_conf}: no confidences of adapter {t.adapter!r} scored by {t.scorer!r} "
                           f"on {t.target!r}'s answers")
        parts.append(g.assign(variant=variant, adapter=s.adapter))
    df = pd.concat(parts, ignore_index=True)[CONF_COLUMNS]
    write_parquet(df, out)
    return {"scorings": len(parts), "rows": len(df), "source": transfer_conf}


def _by_scorer_and_adapter(scorings: Sequence[V.Scoring]) -> dict[str, dict[str, list[int]]]:
    """Indices of `scorings` grouped by scoring checkpoint, then adapter, in order of first
    appearance: one scorer's base is loaded once and its adapters switched on it."""
    groups: dict[str, dict[str, list[int]]] = {}
    for i, s in enumerate(scorings):
        groups.setdefault(s.scorer, {}).setdefault(s.adapter, []).append(i)
    return groups


def save_hidden_states(plan: V.VariantPlan, spec: dict, test_sc: Mapping[str, pd.DataFrame],
                       adapter_dirs: Mapping[str, str], out: str, n_items: int | str, *,
                       device: str = "cpu") -> tuple:
    """Hidden states (n_ckpt, n_layers, n_items, d) of each checkpoint's own single-view
    adapter on its own answers to the first `n_items` test questions by item id (§B.7);
    `n_items` "all" (the authors' run) or 0: every test question."""
    own = [a for a in plan.adapters if len(a.views) == 1 and a.name == a.views[0]]
    if not own:
        raise ValueError(f"variant {plan.variant} has no per-checkpoint adapters for hidden states")
    ids = sorted(set.intersection(*(set(test_sc[a.name]["item_id"]) for a in own)))
    ids = ids if n_items in ("all", 0) else ids[:n_items]
    hs = []
    for a in own:
        t = test_sc[a.name].set_index("item_id").loc[ids]
        hs.append(adapter_hidden_states(base_model_dir(spec, a.name), adapter_dirs[a.name],
                                        t["question"].tolist(), t["prediction"].fillna("").tolist(), device=device))
        free_memory()  # this checkpoint's base, before the next one's
    arr = np.stack(hs).astype(np.float32)
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, hidden=arr, checkpoints=np.array([a.name for a in own]), item_ids=np.array(ids))
    return arr.shape


# ----------------------------------------------------------------------------------------------
# GCM
# ----------------------------------------------------------------------------------------------
def gcm_job(gcm_spec: dict, train_ckpts: Sequence[str], eval_ckpts: Sequence[str],
            sc_paths: Mapping[ScInput, str], adapter_dir: str, out: str, *, seed: int, cache_dir: str,
            threads: int = 1, hparams: Mapping | None = None) -> dict:
    """GCM (§3.1.1, `baselines.train_gcm`): a digit-confidence adapter on another model (the
    last checkpoint of `gcm_spec`), shown only question and candidate answer, trained on the
    pooled train-split top-1 answers of the non-oracle training checkpoints; scores the
    evaluation checkpoints' test answers and the training checkpoints' train answers."""
    import torch

    torch.set_num_threads(int(threads))
    sc = {k: read_sc(p) for k, p in sc_paths.items()}
    t0 = time.time()
    frames = {c: training_examples(sc[ScInput(V.MAIN, "train", c)], 1) for c in train_ckpts}
    train_gcm(frames, base_model_dir(gcm_spec, None), adapter_dir, seed, _hparams(gcm_spec, threads, hparams),
              log=log.info)
    t_train = time.time() - t0
    free_memory()  # the training base, before the scoring one
    lm = load_lm(gcm_spec, None, cache_dir=cache_dir, adapter=adapter_dir)
    rows = []
    for split, ckpts in (("test", eval_ckpts), ("train", train_ckpts)):
        for c in ckpts:
            t = sc[ScInput(V.MAIN, split, c)]
            conf = predict_confidence(lm, t["question"].tolist(), t["prediction"].fillna("").tolist())
            rows.append(pd.DataFrame({"seed": seed, "method": "gcm_trained", "target": c, "split": split,
                                      "item_id": t["item_id"].to_numpy(), "correct": t["correct"].to_numpy(),
                                      "confidence": conf}))
    df = pd.concat(rows, ignore_index=True)
    write_parquet(df, out)
    return {"rows": len(df), "train_seconds": round(t_train, 1), "model_calls": lm.stats.misses}


def released_gcm_job(gcm_spec: dict, adapter: Mapping, train_ckpts: Sequence[str], eval_ckpts: Sequence[str],
                     sc_paths: Mapping[ScInput, str], out: str, *, cache_dir: str, threads: int = 1) -> dict:
    """The paper's GCM (§3.1.1): the released adapter (`adapter`: hub_id, revision) on its
    backbone `gcm_spec`, no training. Scores the evaluation checkpoints' test answers and the
    training checkpoints' train answers (for the post-hoc map) as the authors'
    conset/pred_confidence_gcm.py: P("yes") of the next token, softmax over the whole vocabulary,
    after the model-agnostic prompt (`prompts.released_gcm_prompt`) in the chat template."""
    import torch

    torch.set_num_threads(int(threads))
    lm = load_lm(gcm_spec, None, cache_dir=cache_dir, adapter=hub_snapshot(adapter["hub_id"], adapter["revision"]))
    rows = []
    for split, ckpts in (("test", eval_ckpts), ("train", train_ckpts)):
        for c in ckpts:
            t = read_sc(sc_paths[ScInput(V.MAIN, split, c)])
            prompts = [released_gcm_prompt(q, a) for q, a in zip(t["question"], t["prediction"].fillna(""))]
            conf = np.exp(lm.next_token_logprobs(prompts, [GCM_YES], chat=True)[:, 0])
            rows.append(pd.DataFrame({"method": "gcm", "target": c, "split": split,
                                      "item_id": t["item_id"].to_numpy(), "correct": t["correct"].to_numpy(),
                                      "confidence": conf}))
    df = pd.concat(rows, ignore_index=True)
    write_parquet(df, out)
    return {"rows": len(df), "adapter": f"{adapter['hub_id']}@{adapter['revision']}", "model_calls": lm.stats.misses}


def hub_snapshot(hub_id: str, revision: str) -> str:
    """Local directory of a hub repository's snapshot at `revision` (the HF cache; under
    HF_HUB_OFFLINE=1 only the cache, so a missing adapter is an error naming it)."""
    try:
        return snapshot_download(hub_id, revision=revision)
    except Exception as err:
        raise FileNotFoundError(f"persistent.gcm_adapter {hub_id}@{revision}: not in the hub cache and not "
                                f"downloadable ({type(err).__name__}: {err})") from err


# ----------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------
def assemble_main_methods(eval_ckpts: Sequence[str], train_ckpts: Sequence[str], sc: Mapping[ScInput, pd.DataFrame],
                          variant_frames: Sequence[pd.DataFrame], gcm_frames: Sequence[pd.DataFrame],
                          equivalence: str, normalisation: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """`assemble_methods` on the main dataset's test split: `sc` holds the test answers of the
    evaluation checkpoints and of the last training checkpoint (the surrogate) and the train
    answers of the training checkpoints (for post-hoc calibration)."""
    ev, tr = list(eval_ckpts), list(train_ckpts)
    eval_sc = {c: sc[ScInput(V.MAIN, "test", c)] for c in ev}
    return assemble_methods(eval_sc, ev, train_sc={c: sc[ScInput(V.MAIN, "train", c)] for c in tr},
                            surrogate_sc=sc[ScInput(V.MAIN, "test", tr[-1])], variant_frames=variant_frames,
                            gcm_frames=gcm_frames, dataset=V.MAIN,
                            equivalence=make_equivalence(equivalence, normalisation=normalisation))


def metrics_job(eval_ckpts: Sequence[str], train_ckpts: Sequence[str], sc_paths: Mapping[ScInput, str],
                variant_paths: Sequence[str], gcm_paths: Sequence[str], out_metrics: str,
                out_replicates: str, out_contrast: str, out_records: str, *, evalset: str, min_contrast: int,
                n_boot: int, n_boot_ece: int, seed: int, equivalence: str, normalisation: str,
                clamp: float | None, bt_max_iter: int) -> dict:
    """Metrics of every method for one (model, training dataset, evaluation set): the main
    dataset's test split (`evalset="main"`) or the transfer dataset (both of its splits);
    `sc_paths` as in `variant_job`. The assembled confidences are written as plain records
    (`out_records`) and evaluated by `evaluate.evaluate`, as `selfknow persistent-eval` does;
    `clamp`, `bt_max_iter`: config `persistent.confidence_clamp`, `bt_max_iter`."""
    t0 = time.time()
    ev, tr = list(eval_ckpts), list(train_ckpts)
    sc = {k: read_sc(p) for k, p in sc_paths.items()}
    variant_frames = [read_parquet(p) for p in variant_paths]
    if evalset == V.MAIN:
        items, y, methods = assemble_main_methods(ev, tr, sc, variant_frames, [read_parquet(p) for p in gcm_paths],
                                                  equivalence, normalisation)
    elif evalset == V.TRANSFER:
        items, y, methods = assemble_methods(pooled_transfer(sc), ev, variant_frames=variant_frames,
                                             dataset=V.TRANSFER)
    else:
        raise ValueError(f"evalset must be {V.MAIN!r} or {V.TRANSFER!r}, got {evalset!r}")
    records = records_frame(Confidences(items, ev, y, methods))
    write_parquet(records, out_records)
    (conf,) = record_arrays(records).values()
    res = evaluate(conf, min_contrast=min_contrast, n_boot=n_boot, n_boot_ece=n_boot_ece, seed=seed,
                   bt_methods=C.fitted_methods(), clamp=clamp, bt_max_iter=bt_max_iter)
    write_parquet(res.contrast, out_contrast)
    write_parquet(res.points, out_metrics)
    with atomic_path(out_replicates) as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **res.replicates)
    return {"items": int(items.size), "methods": len(methods), "pairs_used": len(res.pairs),
            "pair_sizes": [p.size for p in res.pairs], "accuracy": [round(float(a), 3) for a in y.mean(axis=1)],
            "seconds": round(time.time() - t0, 1)}


# ----------------------------------------------------------------------------------------------
# reliability diagrams (beyond the paper)
# ----------------------------------------------------------------------------------------------
def reliability_job(eval_ckpts: Sequence[str], train_ckpts: Sequence[str], sc_paths: Mapping[ScInput, str],
                    variant_paths: Sequence[str], gcm_paths: Sequence[str], png: str, *, title: str,
                    seed: int, equivalence: str, normalisation: str, n_bins: int = 10, n_boot: int = 200,
                    provenance: dict | None = None) -> dict:
    """Reliability diagrams of one (model, training dataset) on the full main test set: the
    confidences `metrics_job` assembles (`assemble_main_methods`; same inputs), one panel per
    method with a catalog panel present (`catalog.reliability_panels`; first training seed; answers pooled over the
    evaluation checkpoints), each with `n_bins` binned points and the SmoothECE curve with its
    `n_boot`-resample band (`report.reliability.reliability_grid`, bootstrap seeded by `seed`).
    Writes the PNG (and, with `provenance`, its sidecar)."""
    t0 = time.time()
    ev, tr = list(eval_ckpts), list(train_ckpts)
    sc = {k: read_sc(p) for k, p in sc_paths.items()}
    items, y, methods = assemble_main_methods(ev, tr, sc, [read_parquet(p) for p in variant_paths],
                                              [read_parquet(p) for p in gcm_paths], equivalence, normalisation)
    df = reliability_frame(y, methods)
    fig = reliability_grid(df, png, title=title, n_bins=n_bins, n_boot=n_boot, seed=seed, provenance=provenance)
    smece = {p: round(smooth_ece(d["confidence"].to_numpy(float), d["correct"].to_numpy(float)), 4)
             for p, d in df.groupby("panel", sort=False)}
    return {"panels": len(fig.axes), "items": int(items.size), "checkpoints": len(ev),
            "accuracy": round(float(y.mean()), 4), "smooth_ece": smece, "seconds": round(time.time() - t0, 1)}
