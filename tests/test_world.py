"""The offline mini world: generator determinism and schema, trainer checkpoints."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfknow.records import ITEM_COLUMNS
from selfknow.world.generator import (DEFAULT_WORLD, LETTERS, build_facts, generate_world,
                                      mcq_prompt, qa_prompt)

SMALL = {"seed": 3, "n_domains": 5, "entities_per_domain": 12, "n_phases": 3,
         "intro_probs": [0.6, 0.2, 0.2], "rewrite_rate": 0.3, "rare_rate": 0.3,
         "mcq_practice_per_phase": 20}
FILES = ["corpus.parquet", "facts.parquet", "qa.parquet", "mcq.parquet"]


def _digest(d: Path) -> dict[str, str]:
    return {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in FILES}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("world")
    generate_world(SMALL, d)
    return d


def test_generator_is_deterministic_in_seed(world, tmp_path):
    generate_world(SMALL, tmp_path / "same")
    generate_world({**SMALL, "seed": 4}, tmp_path / "other")
    assert _digest(world) == _digest(tmp_path / "same")
    other = _digest(tmp_path / "other")
    assert all(other[f] != h for f, h in _digest(world).items())


def test_item_schema_aliases_and_splits(world):
    qa = pd.read_parquet(world / "qa.parquet")
    mcq = pd.read_parquet(world / "mcq.parquet")
    facts = pd.read_parquet(world / "facts.parquet")
    n = SMALL["n_domains"] * SMALL["entities_per_domain"] * DEFAULT_WORLD["relations_per_domain"]
    assert len(facts) == len(qa) == len(mcq) == n
    for df, name in ((qa, "world_qa"), (mcq, "world_mcq")):
        assert list(df.columns[: len(ITEM_COLUMNS)]) == ITEM_COLUMNS
        assert df["item_id"].is_unique and (df["dataset"] == name).all()
        assert set(df["split"]) == {"train", "test"}
        assert df.groupby("domain").size().eq(n // SMALL["n_domains"]).all()
    assert qa["choices"].isna().all()
    assert all(a in list(al) for a, al in zip(qa["answer"], qa["aliases"]))
    # splits are disjoint in items and in question text
    tr, te = (set(qa.loc[qa["split"] == s, "question"]) for s in ("train", "test"))
    assert not tr & te
    assert abs((qa["split"] == "test").mean() - DEFAULT_WORLD["test_fraction"]) < 0.02
    # rewritten facts: the reference is the latest value, which differs from the old one
    rw = facts[facts["rewritten"]]
    assert len(rw) > 0 and (rw["value"] != rw["old_value"]).all()
    assert all(list(v)[-1] == ref for v, ref in zip(facts["values_by_phase"], facts["value"]))
    assert (facts["rewrite_phase"].where(facts["rewritten"], 99) > facts["intro_phase"]).all()


def test_mcq_items_have_four_distinct_choices_and_correct_letter(world):
    mcq = pd.read_parquet(world / "mcq.parquet").set_index("item_id")
    qa = pd.read_parquet(world / "qa.parquet").set_index("item_id")
    for iid, row in mcq.iterrows():
        ch = list(row["choices"])
        assert len(ch) == 4 and len(set(ch)) == 4
        assert ch[LETTERS.index(row["answer"])] == qa.loc["wqa-" + iid[len("wmcq-"):], "answer"]
    # letters are spread over positions, not all "A"
    assert mcq["answer"].nunique() == 4


def test_corpus_follows_curriculum(world):
    corpus = pd.read_parquet(world / "corpus.parquet")
    facts = pd.read_parquet(world / "facts.parquet")
    assert corpus["phase"].is_monotonic_increasing
    assert set(corpus["phase"]) == set(range(SMALL["n_phases"]))
    text = {p: "".join(g["text"]) for p, g in corpus.groupby("phase")}
    late = facts[facts["intro_phase"] == 2]
    # a fact introduced in the last phase is never asked earlier
    assert not any(f"Question: {q}\n" in text[0] + text[1] for q in late["question"])
    # test-split MCQ items are never practised verbatim
    mcq = pd.read_parquet(world / "mcq.parquet")
    te = mcq[mcq["split"] == "test"]
    assert not any(mcq_prompt(q, list(c)) in text[p] for q, c in zip(te["question"], te["choices"])
                   for p in text)


def test_qa_prompt_is_few_shot_and_mcq_prompt_needs_four_choices():
    p = qa_prompt("Who?", [("Q1?", "a1"), ("Q2?", "a2")])
    assert p == "Question: Q1?\nAnswer: a1\n\nQuestion: Q2?\nAnswer: a2\n\nQuestion: Who?\nAnswer:"
    assert mcq_prompt("Q?", ["w", "x", "y", "z"]).endswith("D. z\nCorrect option:")
    with pytest.raises(ValueError):
        mcq_prompt("Q?", ["w", "x"])


def test_bad_config_names_the_key():
    with pytest.raises(KeyError, match="n_domain"):
        build_facts({"n_domain": 3})
    with pytest.raises(ValueError, match="intro_probs"):
        build_facts({"n_phases": 4})


TINY_FAMILY = {"seed": 5, "vocab_size": 320, "n_layer": 1, "n_embd": 16, "n_head": 2,
               "seq_len": 64, "batch_size": 4, "max_steps_per_phase": 3, "warmup_steps": 2}


def test_train_family_writes_loadable_deterministic_checkpoints(world, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfknow.world.probe import evaluate_checkpoints
    from selfknow.world.trainer import checkpoint_name, train_family

    train_family(world, TINY_FAMILY, tmp_path / "a")
    train_family(world, TINY_FAMILY, tmp_path / "b")
    ckpts = sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir())
    assert json.loads((tmp_path / "a" / "family.json").read_text())["checkpoints"] == ckpts
    assert ckpts == [checkpoint_name(k) for k in range(SMALL["n_phases"])] == ["phase1", "phase2", "phase3"]
    assert not any(p.name.startswith(".") for p in (tmp_path / "a").iterdir())
    log = pd.read_csv(tmp_path / "a" / "train_log.csv")
    assert list(log.columns[:3]) == ["step", "phase", "loss"] and len(log) == 9
    assert np.isfinite(log["loss"]).all()
    for name in ckpts:
        tok = AutoTokenizer.from_pretrained(tmp_path / "a" / name)
        assert tok.eos_token is not None and tok.pad_token is not None
        ma = AutoModelForCausalLM.from_pretrained(tmp_path / "a" / name)
        mb = AutoModelForCausalLM.from_pretrained(tmp_path / "b" / name)
        assert ma.config.activation_function == TINY_FAMILY.get("activation", "gelu_pytorch_tanh")
        sa, sb = ma.state_dict(), mb.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # training moves the weights
    first = AutoModelForCausalLM.from_pretrained(tmp_path / "a" / ckpts[0]).state_dict()
    last = AutoModelForCausalLM.from_pretrained(tmp_path / "a" / ckpts[-1]).state_dict()
    assert any(not torch.equal(first[k], last[k]) for k in first)
    # the probe runs on the checkpoints and returns one row per (checkpoint, item)
    qa = pd.read_parquet(world / "qa.parquet").head(10)
    res = evaluate_checkpoints([tmp_path / "a" / c for c in ckpts[-2:]], qa, n_shots=2)
    assert len(res) == 20 and res["correct"].dtype == bool


def test_the_fused_gelu_is_gpt2s_tanh_gelu():
    """The world's MLP activation (`gelu_pytorch_tanh`, one fused kernel) computes GPT-2's own
    (`gelu_new`, 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))) to float rounding, forward and
    backward; a family names it in its checkpoints' config."""
    import torch
    from transformers.activations import ACT2FN

    from selfknow.world.trainer import DEFAULT_FAMILY

    x = torch.linspace(-8, 8, 20001, dtype=torch.float64, requires_grad=True)
    hand = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    for name in ("gelu_pytorch_tanh", "gelu_new"):
        y = ACT2FN[name](x)
        assert torch.allclose(y, hand, rtol=0, atol=1e-12), name
        g, = torch.autograd.grad(y.sum(), x)
        h, = torch.autograd.grad(hand.sum(), x, retain_graph=True)
        assert torch.allclose(g, h, rtol=0, atol=1e-12), name
    assert DEFAULT_FAMILY["activation"] == "gelu_pytorch_tanh"


def test_a_long_first_phase_and_a_lower_later_rate(world, tmp_path):
    """The first phase runs `first_phase_epochs` passes and the later ones `epochs_per_phase` at
    `later_lr_factor` x lr; the log holds the rate each step used (warm-up included)."""
    from selfknow.world.trainer import _blocks, train_family, train_tokenizer

    cfg = {**TINY_FAMILY, "max_steps_per_phase": None, "first_phase_epochs": 3, "later_lr_factor": 0.25,
           "lr": 0.01, "warmup_steps": 4}
    train_family(world, cfg, tmp_path / "f")
    log = pd.read_csv(tmp_path / "f" / "train_log.csv")
    corpus = pd.read_parquet(world / "corpus.parquet")
    tok = train_tokenizer(corpus["text"].tolist(), cfg["vocab_size"])
    blocks = [len(_blocks(corpus.loc[corpus["phase"] == p, "text"].tolist(), tok, cfg["seq_len"], "all")[0])
              for p in range(SMALL["n_phases"])]
    steps = log.groupby("phase").size().tolist()
    assert steps == [3 * blocks[0] // 4] + [b // 4 for b in blocks[1:]]
    assert log["lr"].iloc[:4].tolist() == pytest.approx([0.0025, 0.005, 0.0075, 0.01])
    assert (log.loc[(log["phase"] == 0) & (log["step"] > 4), "lr"] == 0.01).all()
    assert log.loc[log["phase"] > 0, "lr"].tolist() == pytest.approx([0.0025] * sum(steps[1:]))


def test_checkpoint_name_is_known_before_training():
    from selfknow.world.trainer import checkpoint_name

    assert [checkpoint_name(k) for k in range(3)] == ["phase1", "phase2", "phase3"]
    with pytest.raises(ValueError, match="phase_index"):
        checkpoint_name(-1)
