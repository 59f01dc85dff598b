"""Speed of the `hf` backend's batched beam search against one prompt at a time, same run.

    python benchmarks/bench_beam.py [--prompts 64] [--beams 10] [--new-tokens 12]
                                    [--batch-size 16] [--threads 1]

A random tiny GPT-2 (3 layers, 96 dims, the test fixture's BPE tokenizer) in a temp dir;
prompts of ~90 tokens; stop at the first newline (persistent §3.1.1 self-consistency).
Timed, uncached (`beam_search_batch`, so the disk cache plays no part):
1. batched: `batch_size` prompts x `beams` rows per forward step;
2. one at a time: the same code with batch_size 1 (no padding);
3. batched without the shared-prefix attention (`prefix_attention`): the plain per-beam cache a
   model or transformers release without the kernel's requirements runs;
4. the pre-batching implementation (the oracle `reference_beam_search` of
   tests/test_models_hf.py), on the first 16 prompts, since it is slow.
Checks that 1, 2 and 3 return the same beams (texts identical, log-probs within 1e-4), prints
seconds per prompt and the ratios; then greedy `generate` per-prompt time, batched and single.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

TESTS = Path(__file__).resolve().parents[1] / "tests"


def build_model(out: Path) -> Path:
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    sys.path.insert(0, str(TESTS))
    from model_fixtures import build_tiny_gpt2

    import torch

    build_tiny_gpt2(out, seed=0)  # its tokenizer; the model is replaced by a larger one
    tok = AutoTokenizer.from_pretrained(out)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=96, n_layer=3, n_head=3,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     initializer_range=0.3)
    GPT2LMHeadModel(cfg).eval().save_pretrained(out)
    return out


def make_prompts(tok, n: int, target: int = 90) -> list[str]:
    from model_fixtures import CORPUS

    base = sorted(set(CORPUS))
    prompts = []
    for i in range(n):
        parts, j = [], i
        while len(tok(" ".join(parts))["input_ids"]) < target - 16:
            parts.append(base[j % len(base)])
            j += 3
        prompts.append(" ".join(parts) + f"\nQuestion {i}: what is two plus two?\nAnswer:")
    return prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--beams", type=int, default=10)
    ap.add_argument("--new-tokens", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reference-prompts", type=int, default=16)
    args = ap.parse_args()

    import numpy as np
    import torch

    from selfknow.models import load_lm
    from selfknow.models.hf import prefix_attention

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model(Path(tmp) / "gpt2")
        spec = {"name": "bench", "backend": "hf", "path": str(path)}
        batched = load_lm({**spec, "batch_size": args.batch_size}, cache_dir=None)
        single = load_lm({**spec, "batch_size": 1}, cache_dir=None)
        prompts = make_prompts(batched.tokenizer, args.prompts)
        ids = [batched.tokenizer(p)["input_ids"] for p in prompts]
        print(f"{len(ids)} prompts, {min(map(len, ids))}-{max(map(len, ids))} tokens "
              f"(mean {np.mean([len(x) for x in ids]):.1f}); {args.beams} beams, "
              f"{args.new_tokens} new tokens, stop '\\n', torch threads {args.threads}")
        kw = dict(num_beams=args.beams, max_new_tokens=args.new_tokens, stop=("\n",))
        single.beam_search_batch(ids[:2], **kw)  # warm-up (lazy loading, allocator)
        batched.beam_search_batch(ids[:2], **kw)

        t0 = time.perf_counter()
        got = batched.beam_search_batch(ids, **kw)
        t_batched = (time.perf_counter() - t0) / len(ids)
        t0 = time.perf_counter()
        one = single.beam_search_batch(ids, **kw)
        t_single = (time.perf_counter() - t0) / len(ids)
        with mock.patch.object(prefix_attention, "supported", lambda model: False):
            t0 = time.perf_counter()
            plain = batched.beam_search_batch(ids, **kw)
            t_plain = (time.perf_counter() - t0) / len(ids)
        for a, b, c in zip(got, one, plain):
            assert [x["text"] for x in a] == [x["text"] for x in b] == [x["text"] for x in c]
            for other in (b, c):
                np.testing.assert_allclose([x["logprob"] for x in a],
                                           [x["logprob"] for x in other], atol=1e-4)
        sys.path.insert(0, str(TESTS))
        from test_models_hf import reference_beam_search

        m = min(args.reference_prompts, len(ids))
        t0 = time.perf_counter()
        for x in ids[:m]:
            reference_beam_search(single, x, **kw)
        t_ref = (time.perf_counter() - t0) / m
        print(f"beam search, batched (batch_size {args.batch_size}): "
              f"{1e3 * t_batched:8.1f} ms/prompt")
        print(f"beam search, one at a time (batch_size 1):  {1e3 * t_single:8.1f} ms/prompt  "
              f"-> batched is {t_single / t_batched:.1f}x faster")
        print(f"beam search, batched, plain attention:      {1e3 * t_plain:8.1f} ms/prompt  "
              f"-> the shared-prefix attention is {t_plain / t_batched:.1f}x faster")
        print(f"beam search, pre-batching implementation:   {1e3 * t_ref:8.1f} ms/prompt  "
              f"-> batched is {t_ref / t_batched:.1f}x faster")

        gk = dict(max_new_tokens=args.new_tokens, stop=["\n"])
        batched.generate(prompts[:2], **gk)
        t0 = time.perf_counter()
        batched.generate(prompts, **gk)
        g_batched = (time.perf_counter() - t0) / len(prompts)
        t0 = time.perf_counter()
        for p in prompts[:m]:
            single.generate([p], **gk)
        g_single = (time.perf_counter() - t0) / m
        print(f"greedy generate, batched (batch_size {args.batch_size}): "
              f"{1e3 * g_batched:6.1f} ms/prompt; one at a time: {1e3 * g_single:6.1f} "
              f"ms/prompt ({g_single / g_batched:.1f}x)")


if __name__ == "__main__":
    main()
