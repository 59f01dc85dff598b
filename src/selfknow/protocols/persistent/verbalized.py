"""LoRA verbalized confidence (persistent §3.1.1, §A.7) and its training variants (§3.2, §4,
Tables 3-4, Figure 3).

Read-out. The model reads "Rate your confidence on a scale of 0-9 ... Question: q
Candidate answer: a\\nConfidence:" and the confidence is E[d]/9 under the next-token
distribution restricted to the ten digit tokens and renormalised over them, computed with the
checkpoint's own (untouched) LM head. Which digit tokens: the ones that continue "Confidence:"
the way the tokenizer itself splits the text "Confidence: 7" (`digit_format_for`). GPT-2 style
byte-level BPE with the merges " 0".." 9" gives "Confidence:" + " 7" -> prompt ends at the colon,
candidates " 0".." 9". Tokenizers that keep the space apart from digits (Olmo's cl100k-style
pre-tokenizer, or a small BPE without the merges) give "Confidence: " + "7" -> prompt ends with
the space (exactly the authors' `"...\\nConfidence: "`), candidates "0".."9". Either way the
prompt is tokenised as the model saw such text in pre-training. The choice is saved beside the
adapter (`confidence_readout.json`) and read back by `load_readout`.

Training (§A.7; the defaults of config `persistent.adapter`). LoRA on all linear layers (peft
`target_modules="all-linear"`: for GPT-2 the Conv1D c_attn/c_proj/c_fc, never the LM head),
r=8, alpha=16, no dropout, no bias; AdamW (0.9, 0.999, 1e-8, weight decay 0.01); lr 2e-4
flat for the first 80 % of steps then cosine to 2e-5 over the last 20 % (`lr_at_step`);
batches of 16 questions; 1 epoch; BCE between the confidence and correctness, with
per-example weights. Gradient-norm clipping at 1.0 as in the authors' code (not stated in the
paper). Base weights stay frozen and in eval mode (their own dropout off) so a seed fixes the
run exactly.

Multi-checkpoint (§3.1.1 "the checkpoints share the question shuffle and the loss is averaged
over checkpoints so the effective learning rate is unaffected"; authors' train_confidence.py):
one shuffle of the union of question ids; a batch is 16 questions and contains *every*
checkpoint's examples for those questions, each run through its own base weights carrying the
one shared adapter (one model whose base parameters are swapped per checkpoint,
`views.ViewWeights`, so a job holds one base and the adapter's gradients add up); the
batch loss is sum(weight x BCE) / (questions in batch x checkpoints). Within a
(checkpoint, question) the example weights sum to 1: generation probabilities renormalised over
the kept candidates (multi-answer), and split evenly over data sources (pooled data).

Variants are compositions of these inputs (`variants.AdapterPlan` declares them,
`jobs.adapter_examples` builds them):
- single-checkpoint: `{C2: (dir2, data2)}`;
- multi-checkpoint: `{C1: (dir1, data1), C2: (dir2, data2)}` (oracle: the eval checkpoints);
- respective-checkpoint: one `train_adapter` call per checkpoint;
- multi-answer: `training_frame(candidates, n_answers=2)` for each checkpoint's data;
- random labels on the second checkpoint (Figure 3 right): `randomise_labels(data3, seed)`;
- single-checkpoint-data ablation (Table 4): both checkpoints' models, C3's answers and labels
  for both;
- pooled-data ablation (Table 4): one *respective* run per checkpoint, each on the data of all
  checkpoints pooled (column `source` = data checkpoint).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from selfknow.models.base import LM
from selfknow.models.hf import last_position_logits
from selfknow.models.registry import track_base
from selfknow.records import share_tree
from selfknow.schema import defaults

from .prompts import PROMPT_BODIES, confidence_prompt
from .views import ViewWeights

READOUT_FILE = "confidence_readout.json"
TRAINING_LOG_FILE = "training_log.json"
DIGITS = tuple(str(d) for d in range(10))


# ----------------------------------------------------------------------------------------------
# Read-out
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Readout:
    """How a confidence is read: prompt style ("verbalized" | "gcm"), the "Confidence:" line
    as the prompt ends, and the ten single-token digit candidates in order 0..9."""

    suffix: str = "Confidence:"
    candidates: tuple[str, ...] = tuple(f" {d}" for d in DIGITS)
    style: str = "verbalized"

    def __post_init__(self):
        if len(self.candidates) != 10 or [c.strip() for c in self.candidates] != list(DIGITS):
            raise ValueError(f"digit candidates must be the ten digits 0..9, got {self.candidates}")
        if self.style not in PROMPT_BODIES:
            raise ValueError(f"unknown prompt style {self.style!r}")

    def prompt(self, question: str, answer: str) -> str:
        return confidence_prompt(question, answer, self.suffix, self.style)

    def to_json(self) -> dict:
        return {"suffix": self.suffix, "candidates": list(self.candidates), "style": self.style}

    @classmethod
    def from_json(cls, d: Mapping) -> "Readout":
        return cls(str(d["suffix"]), tuple(d["candidates"]), str(d.get("style", "verbalized")))


def digit_format_for(tokenizer, style: str = "verbalized") -> Readout:
    """Pick the digit tokens the way `tokenizer` itself splits "Confidence: d" (module doc).

    Spaced form when every " d" is one token and "Confidence: d" encodes as
    encode("Confidence:") + [" d"]; otherwise the bare form when every "d" is one token and
    "Confidence: d" encodes as encode("Confidence: ") + ["d"]; otherwise a clear error.
    """
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    spaced = [enc(f" {d}") for d in DIGITS]
    if all(len(t) == 1 for t in spaced):
        head = enc("Confidence:")
        if all(enc(f"Confidence: {d}") == head + spaced[i] for i, d in enumerate(DIGITS)):
            return Readout("Confidence:", tuple(f" {d}" for d in DIGITS), style)
    bare = [enc(d) for d in DIGITS]
    if all(len(t) == 1 for t in bare):
        head = enc("Confidence: ")
        if all(enc(f"Confidence: {d}") == head + bare[i] for i, d in enumerate(DIGITS)):
            return Readout("Confidence: ", DIGITS, style)
        # the tokenizer merges " d" for some digits only: keep the authors' form
        return Readout("Confidence: ", DIGITS, style)
    raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')}: digits 0-9 are not "
                     f"single tokens (spaced {spaced}, bare {bare}); verbalized confidence needs them")


def load_readout(adapter_dir: str | os.PathLike) -> Readout:
    """The read-out a trained adapter was trained with (saved by `train_adapter`)."""
    path = Path(adapter_dir) / READOUT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no read-out spec; was {adapter_dir} written by train_adapter?")
    return Readout.from_json(json.loads(path.read_text()))


def confidence_from_digit_logprobs(logprobs: np.ndarray) -> np.ndarray:
    """E[d]/9 with d ~ softmax over the ten digit log-probabilities (renormalised over the
    ten; §A.7 "probability-weighted average over the tokens 0..9, scaled to [0,1]")."""
    lp = np.asarray(logprobs, dtype=float)
    if lp.ndim != 2 or lp.shape[1] != 10:
        raise ValueError(f"need (n, 10) digit log-probabilities, got shape {lp.shape}")
    z = lp - lp.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return p @ (np.arange(10) / 9.0)


def predict_confidence(lm: LM, questions: Sequence[str], answers: Sequence[str],
                       batch_size: int = 16, readout: Readout | None = None) -> np.ndarray:
    """Verbalized confidence of each (question, candidate answer) under `lm` (a checkpoint
    loaded with its adapter: `load_lm(..., adapter=dir)`); `readout` defaults to
    `load_readout(lm.adapter)` when the LM carries an adapter."""
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    if readout is None:
        if not getattr(lm, "adapter", None):
            raise ValueError("pass readout= (the LM has no adapter to read it from)")
        readout = load_readout(lm.adapter)
    prompts = [readout.prompt(q, "" if a is None else a) for q, a in zip(questions, answers)]
    out = []
    for i in range(0, len(prompts), max(1, int(batch_size))):
        lp = lm.next_token_logprobs(prompts[i:i + batch_size], list(readout.candidates))
        out.append(confidence_from_digit_logprobs(lp))
    return np.concatenate(out) if out else np.zeros(0)


# ----------------------------------------------------------------------------------------------
# Hyper-parameters and schedule
# ----------------------------------------------------------------------------------------------
#: the training settings a config sets (`persistent.adapter`): their list, meaning and §A.7
#: defaults are the config schema's
ADAPTER_DEFAULTS: dict = defaults("persistent.adapter")


@dataclass
class AdapterHParams:
    """The config's `persistent.adapter` settings (defaults: the schema's, §A.7) and how the
    job runs: `num_threads` sets torch's CPU threads; `device`/`dtype`/`gpus` for larger
    machines (from the model entry); `style` the prompt (verbalized or GCM)."""

    r: int = ADAPTER_DEFAULTS["r"]
    alpha: float = ADAPTER_DEFAULTS["alpha"]
    dropout: float = ADAPTER_DEFAULTS["dropout"]
    lr: float = ADAPTER_DEFAULTS["lr"]
    min_lr: float = ADAPTER_DEFAULTS["min_lr"]
    stable_frac: float = ADAPTER_DEFAULTS["stable_frac"]
    batch_size: int = ADAPTER_DEFAULTS["batch_size"]
    epochs: int = ADAPTER_DEFAULTS["epochs"]
    betas: tuple[float, float] = tuple(ADAPTER_DEFAULTS["betas"])
    eps: float = ADAPTER_DEFAULTS["eps"]
    weight_decay: float = ADAPTER_DEFAULTS["weight_decay"]
    grad_clip: float | None = ADAPTER_DEFAULTS["grad_clip"]
    micro_batch_size: int = ADAPTER_DEFAULTS["micro_batch_size"]
    max_length: int = ADAPTER_DEFAULTS["max_length"]
    readout_warmup: int = ADAPTER_DEFAULTS["readout_warmup"]
    autocast: str | None = ADAPTER_DEFAULTS["autocast"]
    attention: str | None = ADAPTER_DEFAULTS["attention"]
    num_threads: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    gpus: int = 0  # > 1 on a GPU device: the base is sharded over that many GPUs
    style: str = "verbalized"

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "AdapterHParams":
        d = dict(d or {})
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown adapter hyper-parameters {unknown}")
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        return cls(**d)


def wsd_decay_steps(total_steps: int, stable_frac: float) -> int:
    """The authors' `int(steps_per_epoch * decay_frac)`, decay_frac = 1 - stable_frac."""
    # rounded: 1 - 0.8 is 0.19999999999999996, and int(5 x that) would drop the authors' step
    return int(total_steps * round(1.0 - stable_frac, 12))


def lr_at_step(step: int, total_steps: int, hp: AdapterHParams) -> float:
    """Learning rate of optimiser step `step` (0-based) out of `total_steps` (§A.7), as the
    authors' `WSDScheduler` (conset/train_confidence.py) computes it: D = int(decay_frac x
    total) decay steps, decay_frac = 1 - stable_frac; steps [0, total - D) at `hp.lr`; decay
    step k = step - (total - D) (0..D-1) at min + (lr - min)(1 + cos(pi k / D))/2, so the first
    decay step still runs at `lr` and the last stays above `min_lr`. Their scheduler restarts
    every epoch; here `total_steps` is the whole run, the same schedule at the paper's one
    epoch (the offline default's 6 epochs decay once, at the end).
    """
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} outside [0, {total_steps})")
    decay = wsd_decay_steps(total_steps, hp.stable_frac)
    stable_end = total_steps - decay
    if step < stable_end:
        return hp.lr
    k = step - stable_end
    # as a multiple of the peak (their LambdaLR), so decay step 0 is the peak to the last bit
    ratio = hp.min_lr / hp.lr if hp.lr else 0.0
    return hp.lr * (ratio + (1.0 - ratio) * 0.5 * (1.0 + math.cos(math.pi * k / decay)))


#: what every step's summed loss is divided by (times the checkpoints): the configured batch
#: size, also for a short last batch (the authors' `prepare_training_weights`)
BATCH_DIVISOR = "batch_size"
#: the authors' straight-through clamp of the confidence before BCE (`forward_confidence`)
CONF_CLAMP = 1e-6


def authors_bce(digit_logits, y):
    """Per-example BCE of the confidence p = E[d]/9 against `y`, as the authors'
    `forward_confidence` + `binary_cross_entropy_with_logits` compute it: p from the float32
    softmax of the digit logits, clamped to [1e-6, 1 - 1e-6] in the forward pass with the
    gradient passed straight through (p + (clamp(p) - p).detach()), then BCE on logit(p)."""
    import torch

    p = _confidence(digit_logits)
    p = p + (p.clamp(CONF_CLAMP, 1 - CONF_CLAMP) - p).detach()
    return torch.nn.functional.binary_cross_entropy_with_logits(torch.logit(p), y, reduction="none")


def question_batches(qids: Sequence[str], seed: int, epoch: int, batch_size: int) -> list[list[str]]:
    """One epoch's batches of question ids, as the authors' `group_examples_by_question`:
    `np.random.RandomState(seed + epoch).shuffle` over `qids` in their canonical order (the
    training split's), cut into runs of `batch_size`, the last one shorter."""
    order = list(qids)
    np.random.RandomState(seed + epoch).shuffle(order)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


# ----------------------------------------------------------------------------------------------
# Training data
# ----------------------------------------------------------------------------------------------
REQUIRED = ("question", "answer", "correct")


def prepare_frame(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Validate one checkpoint's training examples and set per-example loss weights.

    Columns: question, answer, correct (required); question_id (default: the question text),
    weight (generation probability; default 1), source (data origin; default one source).
    Output weight: within (question_id, source) proportional to the input weight and summing
    to 1, then divided by the number of sources of that question -> total 1 per question."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"training data for {name!r} lacks columns {missing}; has {list(df.columns)}")
    out = df.copy().reset_index(drop=True)
    if out.empty:
        raise ValueError(f"training data for {name!r} is empty")
    if "question_id" not in out.columns:
        out["question_id"] = out["question"].astype(str)
    out["question_id"] = out["question_id"].astype(str)
    if "source" not in out.columns:
        out["source"] = "self"
    w = out["weight"].astype(float) if "weight" in out.columns else pd.Series(1.0, index=out.index)
    bad = (~np.isfinite(w) | (w < 0)).to_numpy()
    if bad.any():
        raise ValueError(f"training data for {name!r}: invalid weight at rows {list(np.flatnonzero(bad)[:5])}")
    corr = out["correct"]
    if corr.isna().any():
        raise ValueError(f"training data for {name!r}: missing correctness at rows "
                         f"{list(np.flatnonzero(corr.isna().to_numpy())[:5])}")
    out["correct"] = corr.astype(bool)
    out["answer"] = out["answer"].fillna("").astype(str)
    out["question"] = out["question"].astype(str)
    keys = [out["question_id"], out["source"]]
    tot = w.groupby(keys).transform("sum")
    cnt = w.groupby(keys).transform("size")
    w = np.where(tot > 0, w / tot.where(tot > 0, 1.0), 1.0 / cnt)
    n_src = out.groupby("question_id")["source"].transform("nunique")
    out["loss_weight"] = w / n_src
    return out


def merge_repeated_prompts(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct (question, answer, label) of a prepared frame, its loss weight
    the sum of the merged rows'. Pooled sources that gave the same answer make the same
    prompt, and the loss is a weighted sum over rows, so each prompt's forward and backward
    pass runs once with the gradient unchanged (the mini world's pooled data: 1,440 rows, 1,056
    prompts)."""
    keys = ["question_id", "question", "answer", "correct"]
    return frame.groupby(keys, sort=False, as_index=False)["loss_weight"].sum()


def training_frame(candidates: pd.DataFrame, n_answers: int = 1) -> pd.DataFrame:
    """Training examples from judged candidates (one row per item x candidate: item_id,
    question, answer, probability, correct; e.g. `self_consistency.candidates_frame` joined
    with judgments). Keeps the top `n_answers` by probability per item (multi-answer training,
    §3.1.1: 2 by default in the paper's multi-answer runs); weight = generation probability."""
    need = ("item_id", "question", "answer", "probability", "correct")
    missing = [c for c in need if c not in candidates.columns]
    if missing:
        raise ValueError(f"candidates lack columns {missing}")
    if n_answers < 1:
        raise ValueError("n_answers must be >= 1")
    c = candidates[candidates["answer"].fillna("").astype(str).str.strip() != ""]
    c = c.sort_values(["item_id", "probability"], ascending=[True, False], kind="stable")
    top = c.groupby("item_id", sort=False).head(n_answers)
    return pd.DataFrame({"question_id": top["item_id"].astype(str).to_numpy(),
                         "question": top["question"].to_numpy(),
                         "answer": top["answer"].to_numpy(),
                         "correct": top["correct"].astype(bool).to_numpy(),
                         "weight": top["probability"].astype(float).to_numpy()})


def randomise_labels(df: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Copy of `df` with `correct` replaced by independent Bernoulli(0.5) draws (§4 "Random
    Labels": the second checkpoint of a multi-checkpoint run gets random labels)."""
    out = df.copy()
    out["correct"] = np.random.default_rng(seed).random(len(out)) < 0.5
    return out


TrainingSet = Mapping[str, tuple[str, pd.DataFrame]]


# ----------------------------------------------------------------------------------------------
# Torch internals
# ----------------------------------------------------------------------------------------------
def _digit_ids(tokenizer, readout: Readout) -> list[int]:
    ids = [tokenizer.encode(c, add_special_tokens=False) for c in readout.candidates]
    if any(len(t) != 1 for t in ids):
        raise ValueError(f"digit candidates {readout.candidates} are not single tokens: {ids}")
    return [t[0] for t in ids]


def _encode(model, tokenizer, prompts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of each prompt, checked against the model's context."""
    enc = [tokenizer(p, add_special_tokens=True)["input_ids"] for p in prompts]
    cfg = getattr(model, "config", None)
    limit = min(max_length, getattr(cfg, "n_positions", None)
                or getattr(cfg, "max_position_embeddings", None) or max_length)
    for p, e in zip(prompts, enc):
        if len(e) > limit:
            raise ValueError(f"confidence prompt of {len(e)} tokens exceeds the limit {limit}: {p[-200:]!r}")
    return enc


def _digit_logits(model, tokenizer, enc: Sequence[Sequence[int]], digit_ids: Sequence[int], device: str):
    """(n, 10) logits of the digit tokens after each encoded prompt. Right padding and a
    gather at each row's last real token, so padding never shifts positions (GPT-2 has
    absolute ones)."""
    import torch

    lengths = torch.tensor([len(e) for e in enc])
    width = int(lengths.max())
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(enc), width), pad, dtype=torch.long)
    mask = torch.zeros((len(enc), width), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, :len(e)] = torch.tensor(e)
        mask[i, :len(e)] = 1
    last = last_position_logits(model, ids.to(device), mask.to(device), lengths)
    return last[:, list(digit_ids)].float()


def _confidence(digit_logits):
    """p = E[d]/9 under the float32 softmax of the ten digit logits."""
    import torch

    probs = torch.softmax(digit_logits.float(), dim=-1)
    return (probs * (torch.arange(10, device=probs.device, dtype=probs.dtype) / 9.0)).sum(dim=-1)


def _load_base(model_dir: str, hp: AdapterHParams):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    dtype = getattr(torch, hp.dtype)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    track_base(model)
    model.to(hp.device)
    return model, tok


def _lora_config(model, hp: AdapterHParams):
    from peft import LoraConfig

    try:
        from transformers.pytorch_utils import Conv1D
        conv1d = any(isinstance(m, Conv1D) for m in model.modules())
    except ImportError:  # pragma: no cover - old transformers
        conv1d = False
    return LoraConfig(r=hp.r, lora_alpha=hp.alpha, lora_dropout=hp.dropout, bias="none",
                      target_modules="all-linear", task_type="CAUSAL_LM",
                      fan_in_fan_out=conv1d)  # GPT-2 Conv1D stores weights (in, out)


def _save_atomic(model, out_dir: Path, extra: Mapping[str, dict]) -> None:
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(str(tmp))
        for fname, obj in extra.items():
            (tmp / fname).write_text(json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")
        share_tree(tmp)  # mkdtemp makes a private dir, safetensors private files
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / "x")
            shutil.rmtree(old)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _jsonable(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------
def _shared_readout(toks: Sequence, names: Sequence[str], hp: AdapterHParams) -> tuple:
    """The digit read-out every checkpoint's tokenizer shares (one adapter serves them all),
    and each tokenizer's ids of the ten digits."""
    readouts = [digit_format_for(tok, hp.style) for tok in toks]
    digit_ids = [_digit_ids(tok, ro) for tok, ro in zip(toks, readouts)]
    if len(set(readouts)) != 1:
        raise ValueError(f"checkpoints need one digit read-out for a shared adapter, got "
                         f"{dict(zip(names, readouts))}")
    return readouts[0], digit_ids


def _warm_up(run_step: Callable, qids: Sequence[str], seed: int, hp: AdapterHParams,
             say: Callable[[str], None]) -> list[dict]:
    """The read-out warm-up's steps (`hp.readout_warmup` of them, numbered below 0). A base
    model's digit distribution after "Confidence:" can put nearly all its mass on a few digits
    (a world model trained from scratch: 84 % on "5"); BCE through E[d]/9 then pushes the few
    live digits to a one-hot whose gradient vanishes and the adapter stays a constant. These
    steps first spread the mass over the ten digits."""
    steps: list[dict] = []
    warm_rng = np.random.default_rng([seed, 0, 0])  # not an epoch's stream (seed + epoch)
    for w_step in range(hp.readout_warmup):
        order = warm_rng.permutation(len(qids))
        per_ckpt = run_step([qids[i] for i in order[:hp.batch_size]], hp.lr, warmup=True)
        steps.append({"step": w_step - hp.readout_warmup, "epoch": -1, "lr": hp.lr, "loss": sum(per_ckpt.values()),
                      "loss_by_checkpoint": per_ckpt, "n_questions": min(hp.batch_size, len(qids))})
    if hp.readout_warmup:
        say(f"read-out warm-up: {hp.readout_warmup} steps, cross-entropy to uniform digits {steps[-1]['loss']:.4f}")
    return steps


def _lora_model(base, seed: int, hp: AdapterHParams) -> tuple:
    """A fresh LoRA adapter on the frozen `base` (its attention switched to `hp.attention`),
    and the context its training forward passes run in (`hp.autocast`; the backward pass
    follows the forward's dtypes by itself)."""
    import torch
    from peft import get_peft_model

    for p in base.parameters():
        p.requires_grad_(False)
    if hp.attention:
        base.set_attn_implementation(hp.attention)
    torch.manual_seed(seed)  # the same LoRA initialisation for every method
    model = get_peft_model(base, _lora_config(base, hp))
    model.eval()  # base dropout off; LoRA dropout is 0 anyway (§A.7)
    precision = torch.autocast(torch.device(hp.device).type, dtype=getattr(torch, hp.autocast or "float32"),
                               enabled=hp.autocast is not None)
    return model, precision


def _fit(views: ViewWeights, frames: Mapping[str, pd.DataFrame], qids: Sequence[str], seed: int,
         hp: AdapterHParams, say: Callable[[str], None]) -> tuple:
    """`train_adapter`'s optimisation: a fresh LoRA adapter on `views.model`, trained on every
    view's examples (`frames`, in view order); returns (peft model, read-out, per-step log)."""
    import torch

    names = list(frames)
    steps_per_epoch = math.ceil(len(qids) / hp.batch_size)
    total_steps = steps_per_epoch * hp.epochs

    model, precision = _lora_model(views.model, seed, hp)
    toks = views.tokenizers
    readout, digit_ids = _shared_readout(toks, names, hp)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=hp.lr, betas=tuple(hp.betas), eps=hp.eps,
                            weight_decay=hp.weight_decay)

    # tokenised once: the epochs revisit every prompt
    encoded = {n: _encode(model, toks[k], [readout.prompt(q, a) for q, a in zip(f["question"], f["answer"])],
                          hp.max_length) for k, (n, f) in enumerate(frames.items())}
    rows_by_q = {n: f.groupby("question_id").indices for n, f in frames.items()}

    def run_step(batch_q: Sequence[str], lr: float, warmup: bool) -> dict[str, float]:
        """One optimiser step on `batch_q`'s examples of every view: the weighted BCE of the
        confidence (`authors_bce`), or (`warmup`) the cross-entropy of the digit distribution
        against the uniform one, each summed over the batch and divided by batch_size x views
        (the authors' `prepare_training_weights`: a short last batch is not scaled up)."""
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        denom = getattr(hp, BATCH_DIVISOR) * len(names)
        per_ckpt = {}
        for k, n in enumerate(names):
            rows = [r for q in batch_q for r in rows_by_q[n].get(q, ())]
            if not rows:
                continue
            views.use(k)
            f = frames[n]
            y_all = torch.tensor(f["correct"].to_numpy()[rows], dtype=torch.float32)
            w_all = torch.tensor(f["loss_weight"].to_numpy()[rows], dtype=torch.float32)
            total = 0.0
            for s in range(0, len(rows), hp.micro_batch_size):
                sl = slice(s, s + hp.micro_batch_size)
                with precision:
                    logits = _digit_logits(model, toks[k], [encoded[n][r] for r in rows[sl]],
                                           digit_ids[k], hp.device)
                w = w_all[sl].to(logits.device)
                if warmup:
                    per_example = -torch.log_softmax(logits, dim=-1).mean(dim=-1)
                else:
                    per_example = authors_bce(logits, y_all[sl].to(logits.device))
                loss = (w * per_example).sum() / denom
                loss.backward()
                total += float(loss.detach())
            per_ckpt[n] = total
        if hp.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, max_norm=hp.grad_clip)
        opt.step()
        return per_ckpt

    steps = _warm_up(run_step, qids, seed, hp, say)
    step = 0
    for epoch in range(hp.epochs):
        for batch_q in question_batches(qids, seed, epoch, hp.batch_size):
            lr = lr_at_step(step, total_steps, hp)
            per_ckpt = run_step(batch_q, lr, warmup=False)
            steps.append({"step": step, "epoch": epoch, "lr": lr, "loss": sum(per_ckpt.values()),
                          "loss_by_checkpoint": per_ckpt, "n_questions": len(batch_q)})
            if step % 10 == 0 or step == total_steps - 1:
                say(f"step {step + 1}/{total_steps} lr={lr:.2e} loss={steps[-1]['loss']:.4f}")
            step += 1
    return model, readout, steps


def train_adapter(examples_by_checkpoint: TrainingSet, out_dir: str | os.PathLike, seed: int,
                  hparams: AdapterHParams | Mapping | None = None, *,
                  log: Callable[[str], None] | None = None) -> None:
    """Train one LoRA confidence adapter shared by the given checkpoints and save it.

    `examples_by_checkpoint`: checkpoint name -> (base model dir, training examples; see
    `prepare_frame`). One entry = single-checkpoint (or one respective) training; several =
    multi-checkpoint training (module doc). Writes `out_dir` atomically: peft's adapter files,
    `confidence_readout.json` (the read-out used) and `training_log.json` (per-step loss and
    learning rate, per-checkpoint losses, seconds, sizes, hyper-parameters, seed).
    Deterministic given `seed` (LoRA init, question shuffle) and the thread count.
    """
    import torch

    hp = hparams if isinstance(hparams, AdapterHParams) else AdapterHParams.from_dict(hparams)
    if not examples_by_checkpoint:
        raise ValueError("no checkpoints to train on")
    say = log or (lambda s: None)
    t0 = time.time()
    torch.set_num_threads(int(hp.num_threads))

    # a checkpoint none of whose beams gave an answer (an untrained model) has no examples:
    # the others train the adapter; with none at all it is saved untrained (the base model)
    names = [n for n, (_, df) in examples_by_checkpoint.items() if len(df)]
    empty = [n for n in examples_by_checkpoint if n not in names]
    if empty:
        say(f"no training examples of {empty}: " + ("trained on the others" if names else "saved untrained"))
    prepared = {n: prepare_frame(n, examples_by_checkpoint[n][1]) for n in names}
    frames = {n: merge_repeated_prompts(f) for n, f in prepared.items()}
    # the canonical order the authors shuffle: the training split's, as the frames hold it
    qids = list(dict.fromkeys(q for f in frames.values() for q in f["question_id"]))
    with ViewWeights([str(examples_by_checkpoint[n][0]) for n in names or empty[:1]], device=hp.device,
                     dtype=hp.dtype, gpus=hp.gpus) as views:
        model, readout, steps = _fit(views, frames, qids, seed, hp, say)

    import peft
    import transformers

    training_log = {
        "seed": seed, "hparams": asdict(hp), "checkpoints": names, "without_examples": empty,
        "model_dirs": {n: str(examples_by_checkpoint[n][0]) for n in names},
        "n_questions": len(qids), "n_examples": {n: int(len(f)) for n, f in prepared.items()},
        "n_prompts": {n: int(len(f)) for n, f in frames.items()},
        "total_steps": len(steps), "steps": steps, "seconds": time.time() - t0,
        "readout": readout.to_json(),
        "versions": {"peft": peft.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__},
    }
    _save_atomic(model, Path(out_dir), {READOUT_FILE: readout.to_json(),
                                            TRAINING_LOG_FILE: training_log})
    say(f"saved adapter to {out_dir} ({training_log['seconds']:.1f}s)")


def score_local(model_dir: str, adapter_dir: str | None, questions: Sequence[str],
                answers: Sequence[str], *, readout: Readout | None = None, batch_size: int = 32,
                num_threads: int = 1, device: str = "cpu") -> np.ndarray:
    """Verbalized confidences computed directly with transformers (+ peft when `adapter_dir`):
    the same forward pass as training. For checks and for runs without the LM backends;
    the workflow's path is `predict_confidence` with `load_lm(..., adapter=dir)`."""
    import torch

    torch.set_num_threads(int(num_threads))
    hp = AdapterHParams(device=device)
    model, tok = _load_base(model_dir, hp)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
        readout = readout or load_readout(adapter_dir)
    readout = readout or digit_format_for(tok)
    model.eval()
    ids = _digit_ids(tok, readout)
    prompts = [readout.prompt(q, "" if a is None else a) for q, a in zip(questions, answers)]
    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            enc = _encode(model, tok, prompts[i:i + batch_size], hp.max_length)
            logits = _digit_logits(model, tok, enc, ids, device)
            out.append(_confidence(logits).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)
