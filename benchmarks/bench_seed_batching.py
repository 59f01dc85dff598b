"""Would training a variant's seeds in one forward pass pay? Three ways to take one optimizer
step of S seeds, same run.

    python benchmarks/bench_seed_batching.py CKPT_DIR SC_TRAIN_PARQUET [--seeds 3]
                                             [--rows 16 32 78] [--repeats 15]

On one world checkpoint with the default's adapter settings (`persistent.adapter` of
config.yaml: LoRA r=8 on every linear layer, bfloat16 autocast, eager attention), each way
runs the forward pass (`last_position_logits`: the shared instruction once, then each row's
own tokens) and the backward pass of the authors' BCE for `--rows` examples a seed:
1. `sequential`: S steps of one adapter each, as the variant jobs train their seeds now;
2. `mixed`: one step of S x rows with S adapters (peft's `adapter_names`, each row through
   its seed's adapter; the instruction once per seed);
3. `one-adapter`: one step of S x rows through a single adapter: what no per-row adapter
   routing can beat, so its ratio bounds any batching of seeds.
Rows per step of a view in the default: 16 (one answer a question), ~32 (two), ~78 (the
pooled data of four checkpoints). Prints each way's median process CPU time per step over
`--repeats` interleaved rounds (after 3 untimed) and its ratio to `sequential`.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt_dir")
    ap.add_argument("sc_train")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 32, 78])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()

    import torch

    from selfknow.models.hf.scoring import kv_cache, last_position_logits, right_padded, shared_prefix_length
    from selfknow.protocols.persistent import verbalized as V
    from selfknow.protocols.persistent.jobs import read_sc, training_examples

    torch.set_num_threads(1)
    frame = training_examples(read_sc(args.sc_train), 2)
    hp = V.AdapterHParams(autocast="bfloat16", attention="eager")
    # one adapter (sequential, one-adapter: each seed's step costs the same) and S adapters
    # (mixed), each on its own copy of the base
    single, precision = V._lora_model(V._load_base(args.ckpt_dir, hp)[0], 0, hp)
    base, tok = V._load_base(args.ckpt_dir, hp)
    multi, _ = V._lora_model(base, 0, hp)
    names = ["default"]
    for s in range(1, args.seeds):
        torch.manual_seed(s)
        multi.add_adapter(f"seed{s}", V._lora_config(base, hp))
        names.append(f"seed{s}")
    for n, p in multi.named_parameters():
        p.requires_grad_("lora_" in n)
    multi.eval()
    readout = V.digit_format_for(tok)
    digits = V._digit_ids(tok, readout)
    enc = V._encode(single, tok, [readout.prompt(q, a) for q, a in zip(frame["question"], frame["answer"])],
                    hp.max_length)

    def backward(logits):
        y = torch.ones(len(logits))
        V.authors_bce(logits[:, digits].float(), y).sum().backward()

    def sequential(rows: int) -> None:
        for s in range(args.seeds):
            ids, mask = right_padded(enc[s * rows:(s + 1) * rows], tok.pad_token_id or 0)
            with precision:
                logits = last_position_logits(single, ids, mask, mask.sum(dim=1))
            backward(logits)

    def mixed(rows: int) -> None:
        ids, mask = right_padded(enc[:args.seeds * rows], tok.pad_token_id or 0)
        lengths = mask.sum(dim=1)
        prefix = shared_prefix_length(ids, lengths)
        with precision:
            out = multi(input_ids=ids[:1, :prefix].expand(args.seeds, -1),
                        attention_mask=mask[:1, :prefix].expand(args.seeds, -1), use_cache=True,
                        adapter_names=names)
            cache = kv_cache(out)
            cache.batch_repeat_interleave(rows)
            logits = multi(input_ids=ids[:, prefix:], attention_mask=mask, past_key_values=cache, use_cache=True,
                           logits_to_keep=(lengths - 1 - prefix)[:, None],
                           adapter_names=[n for n in names for _ in range(rows)]).logits[:, 0]
        backward(logits)

    def one_adapter(rows: int) -> None:
        ids, mask = right_padded(enc[:args.seeds * rows], tok.pad_token_id or 0)
        with precision:
            logits = last_position_logits(single, ids, mask, mask.sum(dim=1))
        backward(logits)

    ways = {"sequential": sequential, "mixed": mixed, "one-adapter": one_adapter}
    print(f"{args.seeds} seeds, {len(enc)} prompts of {args.ckpt_dir}")
    for rows in args.rows:
        times: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(args.repeats + 3):
            for w, fn in ways.items():
                t = time.process_time()
                fn(rows)
                single.zero_grad(set_to_none=True)
                multi.zero_grad(set_to_none=True)
                if r >= 3:
                    times[w].append(time.process_time() - t)
        ref = statistics.median(times["sequential"])
        cells = ", ".join(f"{w} {1000 * statistics.median(t):.1f} ms ({statistics.median(t) / ref:.2f}x)"
                          for w, t in times.items())
        print(f"{rows:3d} rows a seed: {cells}")


if __name__ == "__main__":
    main()
