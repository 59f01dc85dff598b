"""Train a family of small GPT-2-style causal LMs from scratch on a world's corpus.

A *family* is one architecture + seed. Training walks the corpus phase by phase (the world's
time curriculum, ``selfknow.world.generator``) and saves one checkpoint at the end of every
phase as an ordinary Hugging Face model directory (``GPT2LMHeadModel`` + a
``PreTrainedTokenizerFast`` with eos/pad set), so the rest of the pipeline loads it as any
local ``hf`` model (path + checkpoint name). Heavy imports happen inside functions.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from selfknow.config import checkpoint_name
from selfknow.records import share_tree, write_csv, write_json
from selfknow.schema import defaults
from selfknow.world.generator import LETTERS

EOS = "<|endoftext|>"

#: a family's settings: their list, meaning and defaults are the config schema's
#: `world.families.*`
DEFAULT_FAMILY: dict[str, Any] = defaults("world.families.*")

DEFAULT_FAMILIES: dict[str, dict[str, Any]] = {
    "wm-small": {**DEFAULT_FAMILY, "seed": 0, "n_layer": 2, "n_embd": 96},
    "wm-base": {**DEFAULT_FAMILY, "seed": 1, "n_layer": 2, "n_embd": 96},
}


def _resolve(family_cfg: dict | None) -> dict:
    cfg = dict(family_cfg or {})
    cfg.pop("name", None)
    unknown = sorted(set(cfg) - set(DEFAULT_FAMILY))
    if unknown:
        raise KeyError(f"family config: unknown key(s) {unknown}; known: {sorted(DEFAULT_FAMILY)}")
    return {**DEFAULT_FAMILY, **cfg}


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE over the corpus (+ the four option-letter tokens " A".." D"), wrapped as a
    transformers fast tokenizer (eos = pad = ``<|endoftext|>``, left padding for batched
    generation)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    # The MCQ option letters after "Correct option:" must be single tokens (the probe and the
    # LADDER letter scoring read one next-token distribution); BPE only merges " A" when MCQ
    # text is frequent, so they are added explicitly (single_word: not inside " Atlas").
    tok.add_tokens([AddedToken(f" {L}", single_word=True, normalized=False) for L in LETTERS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS,
                                   bos_token=EOS, unk_token=EOS, padding_side="left")


_TRAINED_SPAN = re.compile(r"(?<=Answer:|option:)[^\n]*\n|^(?!Question:|[A-D]\. |Answer:|Correct option:)[^\n]+\n", re.M)


def _trained_mask(text: str, offsets: list[tuple[int, int]]) -> list[bool]:
    """True for tokens that start inside an answer span or a statement line."""
    marks = np.zeros(len(text) + 1, bool)
    for m in _TRAINED_SPAN.finditer(text):
        marks[m.start():m.end()] = True
    return [bool(marks[a]) for a, _ in offsets]


def _blocks(texts: list[str], tokenizer, seq_len: int, loss_on: str) -> tuple[np.ndarray, np.ndarray]:
    """Documents tokenized, each followed by eos, concatenated and cut into seq_len blocks (the
    ragged tail is dropped); also the per-token loss mask (see ``loss_on``)."""
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=(loss_on == "answers"))
    eos = tokenizer.eos_token_id
    stream = np.fromiter((t for doc in enc["input_ids"] for t in (*doc, eos)), dtype=np.int64)
    if loss_on == "all":
        mask = np.ones(len(stream), bool)
    elif loss_on == "answers":
        mask = np.fromiter((b for text, off in zip(texts, enc["offset_mapping"])
                            for b in (*_trained_mask(text, off), False)), dtype=bool)
    else:
        raise ValueError(f"family config: loss_on must be 'answers' or 'all', got {loss_on!r}")
    n = len(stream) // seq_len
    return stream[: n * seq_len].reshape(n, seq_len), mask[: n * seq_len].reshape(n, seq_len)


def _save_checkpoint(model, tokenizer, out_dir: Path, name: str) -> Path:
    final = out_dir / name
    tmp = out_dir / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    share_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def train_family(world_dir: str | os.PathLike, family_cfg: dict | None,
                 out_dir: str | os.PathLike) -> None:
    """Train one family from scratch on ``world_dir/corpus.parquet`` and save a checkpoint
    ``out_dir/<checkpoint_name(p)>/`` (``phase1``, ...) at the end of every curriculum phase p, plus ``out_dir/train_log.csv``
    (step, phase, loss, lr, seconds) and ``out_dir/family.json`` (resolved config, checkpoint
    names). Deterministic given ``family_cfg["seed"]`` (single-threaded CPU)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = _resolve(family_cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = pd.read_parquet(Path(world_dir) / "corpus.parquet")
    if not {"phase", "text"} <= set(corpus.columns):
        raise ValueError(f"{world_dir}/corpus.parquet: needs columns phase, text")
    torch.set_num_threads(int(cfg["threads"]))
    torch.manual_seed(int(cfg["seed"]))
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(int(cfg["seed"]))

    tokenizer = train_tokenizer(corpus["text"].tolist(), int(cfg["vocab_size"]))
    mcfg = GPT2Config(
        vocab_size=len(tokenizer), n_positions=max(int(cfg["seq_len"]), int(cfg["context"] or 0)), n_embd=int(cfg["n_embd"]),
        n_layer=int(cfg["n_layer"]), n_head=int(cfg["n_head"]), resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, activation_function=str(cfg["activation"]), bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(mcfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]), betas=(0.9, 0.98),
                            weight_decay=float(cfg["weight_decay"]))
    warm = max(int(cfg["warmup_steps"]), 1)
    base_lr = float(cfg["lr"])

    log, names = [], []
    step, t0 = 0, time.process_time()
    bs = int(cfg["batch_size"])
    for phase in sorted(corpus["phase"].unique()):
        blocks, masks = _blocks(corpus.loc[corpus["phase"] == phase, "text"].tolist(), tokenizer,
                                int(cfg["seq_len"]), cfg["loss_on"])
        if len(blocks) < bs:
            raise ValueError(f"{world_dir}/corpus.parquet: phase {phase} has {len(blocks)} blocks "
                             f"of {cfg['seq_len']} tokens, fewer than batch_size {bs}")
        first = phase == min(corpus["phase"])
        epochs = cfg["first_phase_epochs"] if first and cfg["first_phase_epochs"] else cfg["epochs_per_phase"]
        lr_factor = 1.0 if first else float(cfg["later_lr_factor"])
        order = np.concatenate([rng.permutation(len(blocks)) for _ in range(int(epochs))])
        n_steps = len(order) // bs
        if cfg["max_steps_per_phase"] is not None:
            n_steps = min(n_steps, int(cfg["max_steps_per_phase"]))
        for b in range(n_steps):
            rows = order[b * bs:(b + 1) * bs]
            lr = base_lr * lr_factor * min(1.0, (step + 1) / warm)
            for group in opt.param_groups:
                group["lr"] = lr
            x = torch.from_numpy(blocks[rows])
            labels = x.masked_fill(~torch.from_numpy(masks[rows]), -100)
            loss = model(input_ids=x, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            log.append((step, int(phase), float(loss.detach()), lr, time.process_time() - t0))
        model.eval()
        names.append(_save_checkpoint(model, tokenizer, out, checkpoint_name(int(phase))).name)
        model.train()
    write_csv(pd.DataFrame(log, columns=["step", "phase", "loss", "lr", "seconds"]), out / "train_log.csv")
    write_json({"family": cfg, "checkpoints": names, "world_dir": str(world_dir)}, out / "family.json")


def train_job(corpus: str, family: dict, out: str, threads: int) -> None:
    """One family of the workflow (rules/world.smk), trained on the generated world's corpus
    with the job's threads."""
    train_family(Path(corpus).parent, {**family, "threads": threads}, out)
