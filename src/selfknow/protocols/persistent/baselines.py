"""Reference confidence estimators of persistent §3.1.1 and §3.2: the end-correct baseline,
the copy ablation, and the generalised correctness model (GCM).

GCM in this project. The paper runs the released TriviaQA GCM of Xiao et al. (2026) — a LoRA
adapter on Qwen3-8B trained on *other* models' answers, shown only the question and the
candidate answer. Our equivalent, usable offline: a LoRA digit-confidence adapter
(`verbalized.train_adapter`, same §A.7 recipe) on a **different** base model than the one
being evaluated, trained on the train-split answers of the non-oracle training checkpoints
pooled together (each checkpoint one data source, so each question weighs the same), with
the GCM's model-agnostic prompt (`prompts.gcm_body`). In the mini world the GCM base is
another world model of the registry (the config names it), so like Qwen3-8B it knows some
answers the evaluated checkpoints do not and vice versa, and it never sees their weights.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .verbalized import AdapterHParams, TrainingSet, train_adapter


def end_correct_confidences(n_eval_checkpoints: int) -> np.ndarray:
    """Constant confidence per evaluation checkpoint, linear from 0 (first) to 1 (last):
    three checkpoints -> [0, 1/2, 1] (§3.1.1 "End-correct Baseline")."""
    if n_eval_checkpoints < 2:
        raise ValueError(f"the end-correct baseline needs >= 2 evaluation checkpoints, got {n_eval_checkpoints}")
    return np.linspace(0.0, 1.0, int(n_eval_checkpoints))


def end_correct_frame(items: pd.DataFrame, eval_checkpoints: Sequence[str]) -> pd.DataFrame:
    """`items` (any rows with a `checkpoint` column) with a `confidence` column from
    `end_correct_confidences` by the checkpoint's position in `eval_checkpoints`."""
    if "checkpoint" not in items.columns:
        raise ValueError("items lack a 'checkpoint' column")
    level = dict(zip(eval_checkpoints, end_correct_confidences(len(eval_checkpoints))))
    unknown = sorted(set(items["checkpoint"]) - set(level))
    if unknown:
        raise ValueError(f"checkpoints {unknown} are not evaluation checkpoints {list(eval_checkpoints)}")
    out = items.copy()
    out["confidence"] = out["checkpoint"].map(level).astype(float)
    return out


def copy_confidences(source: pd.DataFrame, target_item_ids: Sequence) -> np.ndarray:
    """Copy ablation (§3.2): the last training checkpoint's confidence on *its own* answer to
    each question, reused for an evaluation checkpoint's answer to the same question.

    `source`: item_id, confidence (the training checkpoint's own predictions). Missing items
    raise, naming them."""
    for c in ("item_id", "confidence"):
        if c not in source.columns:
            raise ValueError(f"copy source lacks column {c!r}")
    if source["item_id"].duplicated().any():
        dup = source.loc[source["item_id"].duplicated(), "item_id"].tolist()[:5]
        raise ValueError(f"copy source has duplicate item_ids {dup}")
    conf = source.set_index("item_id")["confidence"]
    target = pd.Index(target_item_ids)
    absent = target.difference(conf.index)
    if len(absent):
        raise KeyError(f"copy source has no confidence for item_ids {list(absent[:10])} ({len(absent)} in all)")
    return conf.reindex(target).to_numpy(dtype=float)


def gcm_training_frame(frames_by_checkpoint: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Pool several checkpoints' (question, answer, correct[, weight, question_id]) training
    examples into one GCM training set; each checkpoint becomes one data source."""
    if not frames_by_checkpoint:
        raise ValueError("no checkpoint answers to pool")
    parts = []
    for name, df in frames_by_checkpoint.items():
        d = df.copy()
        d["source"] = name
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


def train_gcm(frames_by_checkpoint: Mapping[str, pd.DataFrame], gcm_model_dir: str,
              out_dir: str | os.PathLike, seed: int,
              hparams: AdapterHParams | Mapping | None = None, *, log=None) -> None:
    """Train the GCM adapter on `gcm_model_dir` (a model other than the evaluated one) from
    the pooled answers of `frames_by_checkpoint`; read it out later with
    `verbalized.predict_confidence(load_lm(gcm_model, adapter=out_dir), questions, answers)`
    for every evaluated checkpoint's answers."""
    hp = hparams if isinstance(hparams, AdapterHParams) else AdapterHParams.from_dict(hparams)
    hp = dataclasses.replace(hp, style="gcm")
    data: TrainingSet = {"gcm": (gcm_model_dir, gcm_training_frame(frames_by_checkpoint))}
    train_adapter(data, out_dir, seed, hp, log=log)
