"""Where is the signal? A linear probe on a checkpoint's own hidden states (issue #46).

The trained estimators read a checkpoint's confidence through its "Confidence:" prompt. Whether
that prompt's representation carries the checkpoint's correctness at all is a separate question
from whether an adapter learns it, and the probe answers the first one: a logistic regression on
the last layer's hidden state at the prompt's last token, fit on the checkpoint's own training
questions (its top answer and that answer's correctness, as the oracle adapter sees them) and
scored on its test questions. A probe well above chance next to an adapter at chance locates the
defect in the adapter's training; a probe at chance says the checkpoint has nothing to read.

The regularisation strength is chosen by cross-validated AUC on the training questions only
(`CS`, `FOLDS` stratified folds, seeded), so the test AUC is an honest held-out number.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.stats.classification import auc

from .learning_check import bootstrap_auc

#: inverse regularisation strengths tried by cross-validation, and its folds
CS = (0.001, 0.01, 0.1, 1.0)
FOLDS = 5
COLUMNS = ("dataset", "checkpoint", "n_train", "n_train_correct", "n_test", "n_test_correct", "C", "auc",
           "auc_lo", "auc_hi")


def probe_auc(x_train: np.ndarray, y_train, x_test: np.ndarray, seed: int = 0) -> tuple[np.ndarray, float]:
    """Test-set probabilities of a standardised L2 logistic regression fit on the training
    features, with C picked by `FOLDS`-fold cross-validated AUC over `CS`; and that C."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(y_train, dtype=bool)
    folds = min(FOLDS, int(y.sum()), int((~y).sum()))
    if folds < 2:
        raise ValueError(f"the probe needs at least 2 right and 2 wrong training answers (have {int(y.sum())} "
                         f"right of {y.size})")
    cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
    model = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=list(CS), cv=cv, scoring="roc_auc",
                                                                 max_iter=5000))
    model.fit(x_train, y)
    return model.predict_proba(x_test)[:, 1], float(model[-1].C_[0])


def last_hidden_states(tok, model, prompts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """The last layer's hidden state at each prompt's last token (left padding, so the last
    position is every prompt's own last token)."""
    import torch

    out = []
    with torch.inference_mode():
        for i in range(0, len(prompts), batch_size):
            enc = tok(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True)
            hidden = model(**enc, output_hidden_states=True).hidden_states[-1]
            out.append(hidden[:, -1, :].float().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.hidden_size))


def _features(checkpoint_dir: Path, *frames: pd.DataFrame) -> list[np.ndarray]:
    """The confidence prompt's hidden states of each self-consistency frame, the checkpoint
    loaded once for all of them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .verbalized import digit_format_for

    tok = AutoTokenizer.from_pretrained(checkpoint_dir)
    readout = digit_format_for(tok)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32).eval()
    return [last_hidden_states(tok, model, [readout.prompt(q, a) for q, a in zip(sc["question"],
                                                                               sc["prediction"].fillna(""))])
            for sc in frames]


def probe_cells(results: str | os.PathLike, model: str, checkpoints: dict[str, Sequence[str]],
                weights: str | os.PathLike, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """One row per (dataset, evaluation checkpoint) of `checkpoints` (dataset -> checkpoint names):
    the probe's test AUC with its bootstrap interval (`bootstrap_auc`, same seed as the
    estimator check), from the run's self-consistency tables
    (`persistent/sc/<model>/<checkpoint>/<dataset>/{train,test}.parquet`) and the checkpoint
    weights under `weights/<checkpoint>`. A checkpoint with fewer than two right or two wrong
    training answers has nothing to fit: its row has no C and no AUC."""
    from .jobs import read_sc

    root = Path(results) / "persistent" / "sc" / model
    rows = []
    for dataset, cks in checkpoints.items():
        for ck in cks:
            train, test = (read_sc(root / ck / dataset / f"{split}.parquet") for split in ("train", "test"))
            ck_dir = Path(weights) / ck
            if not ck_dir.is_dir():
                raise FileNotFoundError(f"{ck_dir}: no weights for checkpoint {ck} (--weights)")
            y_train = train["correct"].to_numpy(bool)
            y_test = test["correct"].to_numpy(bool)
            row = {"dataset": dataset, "checkpoint": ck, "n_train": int(y_train.size),
                   "n_train_correct": int(y_train.sum()), "n_test": int(y_test.size),
                   "n_test_correct": int(y_test.sum())}
            if min(y_train.sum(), (~y_train).sum()) >= 2:
                x_train, x_test = _features(ck_dir, train, test)
                p, row["C"] = probe_auc(x_train, y_train, x_test, seed=seed)
                row["auc"] = auc(p, y_test)
                row["auc_lo"], row["auc_hi"] = bootstrap_auc(p, y_test, n_boot, seed)
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))
