"""Cost of keeping a CPU job's multi-checkpoint views in scratch files, same run.

    python benchmarks/bench_views.py --view CKPT_DIR SC_TRAIN_PARQUET --view CKPT_DIR SC_TRAIN_PARQUET
                                     [--epochs 5] [--n-answers 2] [--repeats 2] [--threads 1]
                                     [--swap-model HF_DIR] [--swaps 20]

Multi-checkpoint LoRA training (`verbalized.train_adapter`) on the given checkpoints, each
with its own train-split self-consistency table (`persistent/sc/<model>/<ckpt>/<dataset>/
train.parquet`, top `--n-answers` candidates per question, as the variant jobs train), with
the config.yaml adapter settings (lr 2e-3 to 2e-4) and `--epochs`:
1. scratch files: what a CPU job does (`views.FileViews`; one base resident);
2. host memory: every view's weights alive at once (`views.HostViews`, the GPU path's store run on
   the CPU: what CPU jobs did before);
interleaved `--repeats` times after an untimed one-epoch warm-up. Prints seconds of each run, the time spent switching views
(`views.ViewWeights.use`), the ratio, and whether both adapters are bitwise equal. With
`--swap-model`, also times one view switch of that model (two views of the same weights)
with either store: the cost per switch that grows with the model's size.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from unittest import mock


def timed_use(log: list):
    from selfknow.protocols.persistent import views

    use = views.ViewWeights.use

    def wrapper(self, k):
        t = time.perf_counter()
        use(self, k)
        log.append(time.perf_counter() - t)
    return wrapper


def train(examples: dict, store: str, out: Path, hp: dict) -> tuple[float, float]:
    """(seconds of the training, seconds inside view switches)."""
    from selfknow.protocols.persistent import verbalized as V
    from selfknow.protocols.persistent import views

    switches: list[float] = []
    make = views.FileViews if store == "files" else views.HostViews
    with mock.patch.object(views, "view_store", lambda *_: make()), \
            mock.patch.object(views.ViewWeights, "use", timed_use(switches)):
        t = time.perf_counter()
        V.train_adapter(examples, out, seed=0, hparams=hp)
        return time.perf_counter() - t, sum(switches)


def switch_seconds(model_dir: str, store: str, swaps: int) -> float:
    from selfknow.protocols.persistent import views

    make = views.FileViews if store == "files" else views.HostViews
    with mock.patch.object(views, "view_store", lambda *_: make()):
        with views.ViewWeights([model_dir, model_dir]) as stored:
            stored.use(1)  # warm the page cache
            t = time.perf_counter()
            for i in range(swaps):
                stored.use(i % 2)
            return (time.perf_counter() - t) / swaps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--view", nargs=2, action="append", required=True, metavar=("CKPT_DIR", "SC_TRAIN"))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--n-answers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--swap-model")
    ap.add_argument("--swaps", type=int, default=20)
    args = ap.parse_args()

    import torch
    from safetensors.torch import load_file

    from selfknow.protocols.persistent.jobs import read_sc, training_examples

    torch.set_num_threads(args.threads)
    examples = {f"v{k}": (d, training_examples(read_sc(sc), args.n_answers)) for k, (d, sc) in enumerate(args.view)}
    hp = {"epochs": args.epochs, "lr": 2e-3, "min_lr": 2e-4, "num_threads": args.threads}
    print(f"{len(examples)} views, {sum(len(e) for _, e in examples.values())} examples, {args.epochs} epochs")
    root = Path(tempfile.mkdtemp(prefix="bench-views-"))
    train(examples, "host", root / "warm-up", {**hp, "epochs": 1})  # imports, first-call costs
    seconds: dict[str, list] = {"files": [], "host": []}
    for r in range(args.repeats):
        for store in ("files", "host"):
            total, switching = train(examples, store, root / f"{store}{r}", hp)
            seconds[store].append(total)
            steps = json.loads((root / f"{store}{r}" / "training_log.json").read_text())["total_steps"]
            print(f"{store:5s} run {r}: {total:6.1f} s, {switching:5.2f} s switching views ({steps} steps)")
    a = load_file(root / "files0" / "adapter_model.safetensors")
    b = load_file(root / "host0" / "adapter_model.safetensors")
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(f"files / host: {min(seconds['files']) / min(seconds['host']):.3f} (best runs); "
          f"adapters bitwise equal: {same}")
    if args.swap_model:
        for store in ("files", "host"):
            print(f"one view switch of {args.swap_model} ({store}): "
                  f"{switch_seconds(args.swap_model, store, args.swaps) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
