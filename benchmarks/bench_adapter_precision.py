"""A LoRA adapter's training under the offline default's kernels against the former ones, same run.

    python benchmarks/bench_adapter_precision.py --view CKPT_DIR SC_TRAIN_PARQUET [--view ...]
                                                 [--epochs 2] [--n-answers 2] [--repeats 3]

Trains one adapter (`verbalized.train_adapter`, seed 0) on the given world checkpoints, each
with its own train-split self-consistency table (`persistent/sc/<model>/<ckpt>/<dataset>/
train.parquet`), with config.yaml's adapter settings but `--epochs`, under three settings:
1. `reference`: the checkpoints' MLP with transformers' eight-op tanh GELU (`gelu_new`, the
   world's former activation), float32, the attention the model loads with (SDPA);
2. `fused-gelu`: the same weights with PyTorch's fused tanh GELU (`gelu_pytorch_tanh`, the
   world's activation now);
3. `bf16-eager`: that, trained under bfloat16 autocast with eager attention (the default's
   `persistent.adapter` settings).
The settings run interleaved `--repeats` times after an untimed one-epoch warm-up; it prints
each run's CPU seconds of the process (robust to other load on the machine, unlike wall time)
and each setting's best run as a ratio of the reference's.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

SETTINGS = {
    "reference": ("gelu_new", {}),
    "fused-gelu": ("gelu_pytorch_tanh", {}),
    "bf16-eager": ("gelu_pytorch_tanh", {"autocast": "bfloat16", "attention": "eager"}),
}


def with_activation(model_dir: str, activation: str, root: Path) -> str:
    """A copy of `model_dir` whose config names `activation` (the same weights)."""
    out = root / f"{Path(model_dir).name}-{activation}"
    if not out.exists():
        shutil.copytree(model_dir, out)
        cfg = json.loads((out / "config.json").read_text())
        cfg["activation_function"] = activation
        (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--view", nargs=2, action="append", required=True, metavar=("CKPT_DIR", "SC_TRAIN"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--n-answers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    from selfknow.protocols.persistent import verbalized as V
    from selfknow.protocols.persistent.jobs import read_sc, training_examples

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="bench-adapter-precision-"))
    frames = [training_examples(read_sc(sc), args.n_answers) for _, sc in args.view]
    hp = {"epochs": args.epochs, "lr": 2e-3, "min_lr": 2e-4, "readout_warmup": 16, "micro_batch_size": 128}

    def run(setting: str, out: Path, epochs: int) -> float:
        activation, extra = SETTINGS[setting]
        examples = {f"v{k}": (with_activation(d, activation, root), f)
                    for k, ((d, _), f) in enumerate(zip(args.view, frames))}
        t = time.process_time()
        V.train_adapter(examples, out, seed=0, hparams={**hp, **extra, "epochs": epochs})
        return time.process_time() - t

    print(f"{len(frames)} views, {sum(len(f) for f in frames)} examples, {args.epochs} epochs")
    for setting in SETTINGS:
        run(setting, root / f"warm-{setting}", 1)  # imports, first-call costs
    seconds: dict[str, list[float]] = {s: [] for s in SETTINGS}
    for r in range(args.repeats):
        for setting in SETTINGS:
            seconds[setting].append(run(setting, root / f"{setting}{r}", args.epochs))
            print(f"{setting:10s} run {r}: {seconds[setting][-1]:6.1f} CPU s")
    ref = min(seconds["reference"])
    for setting, s in seconds.items():
        print(f"{setting:10s} best {min(s):6.1f} CPU s, {min(s) / ref:.3f}x the reference")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
