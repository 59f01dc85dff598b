"""The items a plan counts over (`selfknow.plan`): the workflow's own (the `items` jobs'
outputs) when built, else built the way the `items` rule builds them (the synthetic world is generated in
memory, 0.2 s), else, for a hub dataset not downloaded yet, placeholders of the size its
config ranges give (else of the sample size, an upper bound) and the typical text lengths of
`TYPICAL_CHARS`. Samples are drawn with `sample_items` and the config's seeds, as the jobs
draw them."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping

import pandas as pd

from selfknow.records import read_parquet
from selfknow.stages.items import SYNTHETIC_LOADERS, build_items, sample_items
from selfknow.world.generator import generate_world

#: placeholder text lengths (characters) of a hub dataset not yet on disk: question, answer,
#: each option (MCQ), options per item; rough means read off the datasets' published samples
TYPICAL_CHARS = {
    "triviaqa": (80, 12, 0, 0), "jeopardy": (90, 14, 0, 0), "bioasq": (110, 20, 0, 0),
    "mmlu": (260, 1, 40, 4), "medxpertqa": (1100, 1, 45, 10),
    # MMLU-Pro and BBH: rough guesses, not read off a sample
    "mmlu_pro": (260, 1, 30, 10), "bbh": (500, 6, 0, 0),
    # LADDER's extension tasks: rough guesses, not read off a sample
    "gsm8k": (240, 4, 0, 0), "humaneval": (450, 200, 0, 0), "bfcl": (120, 60, 0, 0),
}


def _configured_size(spec, split: str) -> int | None:
    """Items of one split of a hub dataset as its config fixes them, else None."""
    if f"{split}_range" in spec:
        lo, hi = spec[f"{split}_range"]
        return hi - lo
    if spec["loader"] == "mmlu" and split == "test":
        lo, hi = spec["subject_range"]
        return len(spec["subjects"]) * (hi - lo)
    return None


def placeholder_items(name: str, spec, split: str, n: int) -> pd.DataFrame:
    """`n` stand-in items of a hub dataset not yet on disk, with its typical text lengths."""
    q, a, opt, k = TYPICAL_CHARS[spec["loader"]]
    domains = list(spec["subjects"]) if "subjects" in spec else ["all"]
    return pd.DataFrame({
        "item_id": [f"{name}:{split}:{i}" for i in range(n)],
        "question": [f"{name} {split} {i}: ".ljust(q, "q") for i in range(n)],
        "answer": ["a" * a] * n, "aliases": [[] for _ in range(n)],
        "choices": [["o" * opt] * k if k else None for _ in range(n)],
        "domain": [domains[i % len(domains)] for i in range(n)], "split": split})


class Items:
    """Train/test items of every configured dataset, found as the module's docstring says:
    `files` are the item files of each dataset ({dataset: {split: path}}), `world` the world's
    generated QA file, as the DAG's jobs write them."""

    def __init__(self, cfg: dict, files: Mapping[str, Mapping[str, str]], world: str | None):
        self.cfg, self.files, self.world = cfg, files, world
        self._cache: dict[str, dict[str, pd.DataFrame | None]] = {}
        self._world: tempfile.TemporaryDirectory | None = None
        self.basis: dict[str, str] = {}

    def _world_dir(self) -> Path:
        if self.world is not None and Path(self.world).is_file():
            return Path(self.world).parent
        if self._world is None:
            self._world = tempfile.TemporaryDirectory(prefix="selfknow-plan-")
            w = self.cfg["world"]
            generate_world({"seed": w["seed"], **w["generator"]}, self._world.name)
        return Path(self._world.name)

    def get(self, name: str) -> dict[str, pd.DataFrame | None]:
        if name in self._cache:
            return self._cache[name]
        spec = self.cfg["datasets"][name]
        paths = {s: Path(p) for s, p in self.files.get(name, {}).items()}
        if paths and all(p.is_file() for p in paths.values()):
            out, self.basis[name] = {s: read_parquet(p) for s, p in paths.items()}, "items on disk"
        elif spec["loader"].startswith("world_"):
            out = build_items(name, dict(spec), self.cfg["seed"], self._world_dir())
            self.basis[name] = "items built from the world"
        elif spec["loader"] in SYNTHETIC_LOADERS:
            out = build_items(name, dict(spec), self.cfg["seed"])
            self.basis[name] = "generated items"
        else:
            sizes = {s: _configured_size(spec, s) for s in ("train", "test")}
            out = {s: None if n is None else placeholder_items(name, spec, s, n) for s, n in sizes.items()}
            self.basis[name] = "placeholders, " + ", ".join(
                f"{s} split: {'size from the config' if n is not None else 'the sample size (an upper bound)'}"
                for s, n in sizes.items())
        self._cache[name] = out
        return out

    def sample(self, name: str, split: str, n: int | None, seed: int, **kw) -> pd.DataFrame | None:
        df = self.get(name)[split]
        if df is None:
            if not n:
                raise ValueError(f"plan: dataset {name!r}: the config fixes neither the size of its {split} "
                                 f"split nor a sample size; build its items first (rule items)")
            df = placeholder_items(name, self.cfg["datasets"][name], split, n)
        return sample_items(df, n or None, seed, **kw)

    def close(self) -> None:
        if self._world is not None:
            self._world.cleanup()
