"""The model-free confidence methods of the persistent paper (§3.1.1, §3.2): each a pure
function of one evaluation set's `MethodInputs` returning (n_seeds, n_eval, n) confidences.
`catalog.METHODS` lists each with its label and the inputs it reads; `metrics.assemble_methods`
calls the ones whose inputs the evaluation set has."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.stats.isotonic import fit_isotonic

from .baselines import copy_confidences, end_correct_confidences
from .self_consistency import surrogate_frame


@dataclass(frozen=True)
class MethodInputs:
    """One evaluation set's answers, as a model-free method reads them: the evaluation
    checkpoints (training order), the ids of the questions all of them answered (sorted),
    each checkpoint's SC table (`eval_sc`), the (n_eval, n) SC confidence and correctness of
    their top answers; and, on the main dataset's test split only (else None), the training
    checkpoints' train-split SC tables (`train_sc`), the last training checkpoint's SC table on
    the same questions (`surrogate_sc`) and the answer `equivalence` that matches answers
    across checkpoints."""

    eval_ckpts: Sequence[str]
    items: np.ndarray
    eval_sc: Mapping[str, pd.DataFrame]
    sc: np.ndarray
    correct: np.ndarray
    train_sc: Mapping[str, pd.DataFrame] | None = None
    surrogate_sc: pd.DataFrame | None = None
    equivalence: Any = None


def matrix(frame: pd.DataFrame, ckpts: Sequence[str], items: np.ndarray, col: str, what: str,
           ckpt_col: str = "target") -> np.ndarray:
    """(len(ckpts), items.size): `frame[col]` of each checkpoint (rows where `ckpt_col` is it)
    on each item; a missing item raises, naming `what`."""
    out = np.empty((len(ckpts), items.size))
    for k, c in enumerate(ckpts):
        s = frame[frame[ckpt_col] == c].drop_duplicates("item_id").set_index("item_id")[col]
        missing = pd.Index(items).difference(s.index)
        if len(missing):
            raise KeyError(f"{what}: checkpoint {c!r} lacks items {list(missing[:5])} ({len(missing)} in all)")
        out[k] = s.reindex(items).to_numpy(dtype=float)
    return out


def end_correct(inp: MethodInputs) -> np.ndarray:
    """§3.1.1: the same confidence for every question of a checkpoint, rising from 0 (first
    evaluation checkpoint) to 1 (last)."""
    return np.repeat(end_correct_confidences(len(inp.eval_ckpts))[:, None], inp.items.size, axis=1)[None]


def self_consistency(inp: MethodInputs) -> np.ndarray:
    """§3.1.1: the probability mass of the top answer's group of equivalent beams."""
    return inp.sc[None]


def sc_posthoc(inp: MethodInputs) -> np.ndarray:
    """SC mapped by an isotonic fit of correctness on SC confidence over the training
    checkpoints' train-split answers (§3.1.1, post-hoc calibration)."""
    x = np.concatenate([d["confidence"].to_numpy(float) for d in inp.train_sc.values()])
    t = np.concatenate([d["correct"].to_numpy(float) for d in inp.train_sc.values()])
    return np.clip(fit_isotonic(x, t)(inp.sc[None]), 0, 1)


def sc_surrogate(inp: MethodInputs) -> np.ndarray:
    """§3.2: the last training checkpoint's SC mass on the group equivalent to each evaluation
    checkpoint's answer."""
    sur = [surrogate_frame(inp.eval_sc[c][["item_id", "prediction"]], inp.surrogate_sc, inp.equivalence).assign(target=c)
           for c in inp.eval_ckpts]
    return np.clip(matrix(pd.concat(sur), inp.eval_ckpts, inp.items, "confidence", "SC surrogate"), 0, 1)[None]


def sc_copy(inp: MethodInputs) -> np.ndarray:
    """§3.2: the last training checkpoint's SC confidence on its own answer, for every
    evaluation checkpoint's answer to the same question."""
    copy = copy_confidences(inp.surrogate_sc[["item_id", "confidence"]], inp.items)
    return np.repeat(copy[None], len(inp.eval_ckpts), axis=0)[None]
