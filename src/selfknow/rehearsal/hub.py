"""Tiny random-weight stand-ins for the paper's hub models, written into a Hugging Face cache
in the hub's own layout, so that `from_pretrained(hub_id, revision=...)` loads them under
`HF_HUB_OFFLINE=1` exactly as it would load the real checkpoints from a pre-filled cache:

    models--<org>--<name>/blobs/<sha256>                    file contents
    models--<org>--<name>/snapshots/<commit>/<file>         symlinks into blobs/
    models--<org>--<name>/refs/<revision>                   the commit of a branch or tag

A revision that is a commit hash is its own snapshot (no ref); a branch's commit is derived
from the hub id and revision. Each checkpoint gets its own weights (seeded from the config
seed, hub id and revision), so checkpoints of one model answer differently, as real ones do.
The tokenizer is a byte-level BPE trained on the dataset fixtures, with a chat template for
the instruct models. A released LoRA adapter the config loads from the hub (the persistent
paper's GCM, `persistent.gcm_adapter`) gets a random-weight stand-in on its backbone's
stand-in, stored the same way under the adapter's hub id; then the tokenizer also learns the
GCM's prompt, so that "yes", the token the GCM is read out by, is one token as in Qwen3's.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

#: the architecture class of each paper model (its hub config's `architectures`) and whether
#: it is an instruct model (ships a chat template)
ARCHITECTURES: dict[str, tuple[str, bool]] = {
    "allenai/Olmo-3-1025-7B": ("Olmo3ForCausalLM", False),
    "allenai/Olmo-3-1125-32B": ("Olmo3ForCausalLM", False),
    "marin-community/marin-8b-base": ("LlamaForCausalLM", False),
    "Qwen/Qwen3-8B": ("Qwen3ForCausalLM", True),
    "meta-llama/Meta-Llama-3-8B-Instruct": ("LlamaForCausalLM", True),
    "mistralai/Mistral-7B-Instruct-v0.3": ("MistralForCausalLM", True),
    "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli": ("DebertaV2ForSequenceClassification", False),
}

#: the NLI head's labels, in MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli's order
NLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}

EOS, PAD, CLS, SEP = "<|endoftext|>", "<|pad|>", "[CLS]", "[SEP]"
ROLES = ("<|system|>", "<|user|>", "<|assistant|>")
#: a chat template that, as Qwen3's, opens an empty thinking block when enable_thinking is false
CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                 "<|endoftext|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n"
                 "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
                 "{% endif %}")

#: the stand-ins' size: hidden 32, 2 layers, 2 heads of 16 (1 key/value head), context 4096
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=False)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE (`tokenizers`) trained on `texts`, with the special tokens above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD, CLS, SEP, *ROLES],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def _transformers_tokenizer(tok, *, chat: bool, nli: bool):
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = tok.__class__.from_str(tok.to_str())  # a copy: the post-processor differs per model
    if nli:  # DeBERTa's pair encoding: [CLS] A [SEP] B [SEP]
        ids = {t: tok.token_to_id(t) for t in (CLS, SEP)}
        tok.post_processor = processors.TemplateProcessing(
            single=f"{CLS} $A {SEP}", pair=f"{CLS} $A {SEP} $B:1 {SEP}:1", special_tokens=list(ids.items()))
        return PreTrainedTokenizerFast(tokenizer_object=tok, cls_token=CLS, sep_token=SEP, pad_token=PAD,
                                       unk_token=None, model_max_length=512)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=PAD,
                                   chat_template=CHAT_TEMPLATE if chat else None, model_max_length=4096)


def _model(architecture: str, vocab_size: int, ids: dict):
    import transformers

    if architecture == "DebertaV2ForSequenceClassification":
        cfg = transformers.DebertaV2Config(
            vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
            pos_att_type=["p2c", "c2p"], position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
            pad_token_id=ids[PAD], id2label=NLI_LABELS, label2id={v: k for k, v in NLI_LABELS.items()})
        return transformers.DebertaV2ForSequenceClassification(cfg)
    family = architecture.removesuffix("ForCausalLM")
    cfg = getattr(transformers, f"{family}Config")(vocab_size=vocab_size, bos_token_id=ids[EOS], eos_token_id=ids[EOS],
                                                  pad_token_id=ids[PAD], **TINY)
    return getattr(transformers, architecture)(cfg)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(map(str, parts)).encode()).digest()[:4], "little")


def commit_of(hub_id: str, revision: str) -> str:
    """The snapshot directory of `revision`: itself when it is a commit hash, else a commit
    derived from the hub id and revision."""
    if _COMMIT.match(revision):
        return revision
    return hashlib.sha1(f"{hub_id}@{revision}".encode()).hexdigest()


def store(cache: Path, hub_id: str, revision: str, files: Path) -> Path:
    """Put the files of directory `files` into `cache` as snapshot `revision` of `hub_id`, in
    the hub cache layout (see the module docstring); returns the snapshot directory."""
    repo = cache / f"models--{hub_id.replace('/', '--')}"
    commit = commit_of(hub_id, revision)
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in sorted(files.rglob("*")):
        if not f.is_file():
            continue
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(f, blob)
        link = snapshot / f.relative_to(files)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    if commit != revision:
        ref = repo / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return snapshot


def hub_models(config: dict) -> list[tuple[str, str]]:
    """(hub id, revision) of every hub checkpoint `config` loads: each `hf` model's checkpoints
    (or its single revision, else main) and the persistent protocol's NLI model (main)."""
    wanted = []
    for m in config["models"]:
        if m["backend"] != "hf" or "hub_id" not in m:
            continue
        revisions = [c["revision"] for c in m.get("checkpoints", []) if "revision" in c] or [m.get("revision", "main")]
        wanted += [(m["hub_id"], r) for r in revisions]
    equivalence = config.get("persistent", {}).get("equivalence", "normalised")
    if equivalence.startswith("nli:"):
        wanted.append((equivalence[4:], "main"))
    return list(dict.fromkeys(wanted))


def hub_adapters(config: dict) -> list[tuple[str, str, str, str]]:
    """(adapter hub id, revision, backbone hub id, backbone revision) of every hub adapter
    `config` loads: the persistent protocol's released GCM on `persistent.gcm_model`."""
    p = config.get("persistent", {})
    if "gcm_adapter" not in p:
        return []
    (base,) = [m for m in config["models"] if m["name"] == p["gcm_model"]]
    revisions = [c["revision"] for c in base.get("checkpoints", []) if "revision" in c]
    base_revision = revisions[-1] if revisions else base.get("revision", "main")
    return [(p["gcm_adapter"]["hub_id"], p["gcm_adapter"]["revision"], base["hub_id"], base_revision)]


def _adapter(base_dir: Path, base_hub_id: str, out: Path) -> None:
    """A random LoRA adapter (rank 8 on the attention projections, every weight non-zero so it
    changes the base's outputs) on the model in `base_dir`, saved as peft saves one."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                      init_lora_weights=False, lora_dropout=0.0))
    with torch.no_grad():
        for name, w in model.named_parameters():
            if "lora_" in name:
                w.normal_(0, 0.3)
    model.save_pretrained(out)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = base_hub_id  # as on the hub, not this machine's path
    cfg_path.write_text(json.dumps(cfg, indent=2))


def build(config: dict, cache: Path, texts: list[str], *, vocab_size: int = 512) -> list[Path]:
    """Write a stand-in for every hub checkpoint of `config` (`hub_models`) and every hub
    adapter (`hub_adapters`) into `cache`; returns the snapshot directories. A hub id without
    a known architecture is an error."""
    import torch
    from transformers.utils import logging as hf_logging

    from selfknow.protocols.persistent.prompts import released_gcm_prompt

    hf_logging.disable_progress_bar()
    unknown = sorted({h for h, _ in hub_models(config) if h not in ARCHITECTURES})
    if unknown:
        raise ValueError(f"no rehearsal stand-in architecture for hub model(s) {unknown}; "
                         f"known: {sorted(ARCHITECTURES)} (selfknow.rehearsal.hub.ARCHITECTURES)")
    adapters = hub_adapters(config)
    if adapters:  # the GCM's prompt, often enough that "yes" merges into one token
        texts = list(texts) + [released_gcm_prompt("q", "a") + " yes no"] * 1000
    tok = train_tokenizer(texts, vocab_size)
    ids = {t: tok.token_to_id(t) for t in (EOS, PAD, CLS, SEP)}
    snapshots = []
    for hub_id, revision in hub_models(config):
        architecture, chat = ARCHITECTURES[hub_id]
        nli = architecture.endswith("SequenceClassification")
        torch.manual_seed(_seed(config["seed"], hub_id, revision))
        with tempfile.TemporaryDirectory() as tmp:
            _model(architecture, tok.get_vocab_size(), ids).save_pretrained(tmp)
            _transformers_tokenizer(tok, chat=chat, nli=nli).save_pretrained(tmp)
            snapshots.append(store(cache, hub_id, revision, Path(tmp)))
    for hub_id, revision, base_id, base_revision in adapters:
        base_dir = cache / f"models--{base_id.replace('/', '--')}" / "snapshots" / commit_of(base_id, base_revision)
        torch.manual_seed(_seed(config["seed"], hub_id, revision))
        with tempfile.TemporaryDirectory() as tmp:
            _adapter(base_dir, base_id, Path(tmp))
            snapshots.append(store(cache, hub_id, revision, Path(tmp)))
    return snapshots
