"""Provenance sidecars: what a table or figure was computed from (SPEC §4, issue #6).

Every table `<name>.csv` (and figure `<name>.png`) gets a `<name>.json` beside it recording

* the config fragment that shaped it and its hash (sha256 of canonical JSON, plus the short
  `selfknow.config.config_hash` that per-item records carry, so the two can be matched),
* the git commit of the code (and whether the work tree had uncommitted changes),
* the models behind it: backend, hub id / local path, revision of every checkpoint, and for
  local checkpoints a fingerprint of their files,
* a sha256 of every input file (the item sample and the upstream records), and
* the versions of the packages that compute numbers.

No timestamp is recorded: rerunning a job on the same inputs must rewrite a byte-identical
sidecar, so a changed sidecar always means a changed input, config, commit or package.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from selfknow.records import write_text

SCHEMA = "selfknow.provenance/1"

#: distributions whose versions can change a number in a table
PACKAGES = ("numpy", "pandas", "scipy", "torch", "transformers", "peft", "snakemake", "selfknow")

#: in a directory, files up to this size are hashed whole; larger ones (model weights)
#: contribute their size and their first and last SAMPLE_BYTES
SMALL_FILE_BYTES = 1 << 20
SAMPLE_BYTES = 1 << 16
_CHUNK = 1 << 20

#: keys of a model spec that identify what was loaded (never credentials: `api_key*` is dropped)
_MODEL_KEYS = ("backend", "source", "hub_id", "path", "gguf_file", "base_url", "model", "revision", "chat")
_CHECKPOINT_KEYS = ("name", "revision", "path", "gguf_file")


def canonical_json(obj: Any) -> str:
    """The one JSON text of `obj` that its hash is taken over: sorted keys, no whitespace."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def config_sha256(fragment: Mapping) -> str:
    return hashlib.sha256(canonical_json(fragment).encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def dir_sha256(root: str | os.PathLike) -> str:
    """Fingerprint of a directory: its sorted relative file names and sizes, the full content
    of files up to SMALL_FILE_BYTES and the head and tail of larger ones (a multi-GB model
    directory is fingerprinted in milliseconds; a retrained model changes every tensor, so the
    samples catch it). Hidden files (temporaries, `.snakemake_timestamp`) are not content."""
    root = Path(root)
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        rel = p.relative_to(root).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        size = p.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with open(p, "rb") as f:
            if size <= SMALL_FILE_BYTES:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    h.update(chunk)
            else:
                h.update(f.read(SAMPLE_BYTES))
                f.seek(size - SAMPLE_BYTES)
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def path_sha256(path: str | os.PathLike) -> str:
    """`file_sha256` of a file, `dir_sha256` of a directory; a clear error if neither."""
    p = Path(path)
    if p.is_file():
        return file_sha256(p)
    if p.is_dir():
        return dir_sha256(p)
    raise FileNotFoundError(f"provenance: input '{path}' does not exist")


def git_state(repo_dir: str | os.PathLike) -> dict:
    """{"commit": HEAD or "unknown", "dirty": bool or None}. A plain copy of the code (no .git,
    or no git binary) is not an error: provenance then says "unknown"."""
    def run(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo_dir), *args], capture_output=True, text=True,
                                 timeout=30, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    if commit is None or not commit.strip():
        return {"commit": "unknown", "dirty": None}
    # Untracked files (new results, scratch notes) do not change what the code computes.
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def package_versions(names: Iterable[str] = PACKAGES) -> dict:
    """Installed versions (None when a package is absent), plus the Python version."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def model_record(spec: Mapping) -> dict:
    """What identifies a model: backend, hub id / path / API model, and every checkpoint's
    revision; a checkpoint (or model) with an existing local path also gets its fingerprint."""
    if "name" not in spec:
        raise ValueError(f"provenance: a model spec needs 'name', got keys {sorted(spec)}")
    rec = {"name": spec["name"]}
    rec.update({k: spec[k] for k in _MODEL_KEYS if k in spec})
    checkpoints = []
    for i, c in enumerate(spec.get("checkpoints") or []):
        if "name" not in c:
            raise ValueError(f"provenance: model '{spec['name']}' checkpoints[{i}] needs 'name'")
        ck = {k: c[k] for k in _CHECKPOINT_KEYS if k in c}
        if c.get("path") and Path(c["path"]).exists():
            ck["fingerprint"] = path_sha256(c["path"])
        checkpoints.append(ck)
    if checkpoints:
        rec["checkpoints"] = checkpoints
    elif spec.get("path") and Path(spec["path"]).exists():
        rec["fingerprint"] = path_sha256(spec["path"])
    return rec


def provenance(config_fragment: Mapping, *, models: Iterable[Mapping] = (), inputs: Iterable[str | os.PathLike] = (),
               repo_dir: str | os.PathLike = ".") -> dict:
    """The provenance record of one table or figure (see the module note). Inputs are keyed by
    the path as given (relative paths stay relative, so two checkouts agree) and sorted."""
    from selfknow.config import config_hash

    fragment = json.loads(canonical_json(config_fragment))  # what was hashed, JSON-clean
    return {
        "schema": SCHEMA,
        "config_hash": config_hash(config_fragment),
        "config_sha256": config_sha256(config_fragment),
        "git": git_state(repo_dir),
        "models": [model_record(m) for m in models],
        "inputs": {str(p): path_sha256(p) for p in sorted({os.fspath(p) for p in inputs})},
        "packages": package_versions(),
        "config": fragment,
    }


def config_fragment(config: Mapping, *, sections: Iterable[str] = (), models: Iterable[str] = (),
                    datasets: Iterable[str] = ()) -> dict:
    """The part of the workflow config a table depends on: the named top-level sections, the
    registry entries of the named models and datasets, and the global seed."""
    cfg_models = {m["name"]: m for m in config.get("models", [])}
    out: dict = {"seed": config.get("seed")}
    for s in sections:
        if s not in config:
            raise KeyError(f"provenance: config has no section '{s}'")
        out[s] = config[s]
    names = list(models)
    missing = [n for n in names if n not in cfg_models]
    if missing:
        raise KeyError(f"provenance: models {missing} are not in the config's models")
    if names:
        out["models"] = [cfg_models[n] for n in names]
    ds = list(datasets)
    if ds:
        out["datasets"] = {d: config["datasets"][d] for d in ds}
    return out


#: the checkout this package was imported from (an editable install); elsewhere git says "unknown"
PACKAGE_REPO = Path(__file__).resolve().parents[3]


def job_provenance(config: Mapping, inputs: Iterable[str | os.PathLike], *, sections: Iterable[str] = (),
                   models: Iterable[str] = (), datasets: Iterable[str] = (),
                   repo_dir: str | os.PathLike | None = None) -> dict:
    """Provenance of a workflow job's outputs: the config fragment of `sections`,
    `models` and `datasets`; each model's backend spec with the workflow-built paths filled in
    (`selfknow.config.model_spec`, so world models are fingerprinted from their checkpoint
    files); the hashes of the job's `inputs`; the commit of this package's checkout."""
    from selfknow.config import model_spec

    names = list(models)
    results = config.get("results", "results")
    return provenance(config_fragment(config, sections=sections, models=names, datasets=datasets),
                      models=[model_spec(config, n, results) for n in names],
                      inputs=[os.fspath(p) for p in inputs], repo_dir=repo_dir or PACKAGE_REPO)


def sidecar_path(path: str | os.PathLike) -> Path:
    """`<dir>/<stem>.json` beside a table's CSV or a figure's PNG."""
    return Path(path).with_suffix(".json")


def to_json(prov: Mapping) -> str:
    """Indented JSON, keys in a fixed order: the record's own order at the top (the summary a
    reader wants first), sorted keys inside."""
    return json.dumps(prov, indent=2, ensure_ascii=False, default=str) + "\n"


def write_sidecar(prov: Mapping, path: str | os.PathLike) -> Path:
    """Write `prov` atomically as the sidecar of the table/figure at `path`; return its path."""
    out = sidecar_path(path)
    ordered = {k: _sorted(v) if k in ("config", "packages", "inputs") else v for k, v in prov.items()}
    write_text(to_json(ordered), out)
    return out


def write_sidecars(prov: Mapping, paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The same record beside every table CSV / figure PNG among `paths` (a job's outputs:
    Markdown, LaTeX, HTML and the sidecars themselves are skipped; a figure and the CSV of its
    data, `figure3.png` and `figure3.csv`, share one sidecar); returns the sidecars written."""
    targets = [Path(p) for p in paths if Path(p).suffix in (".csv", ".png")]
    written: dict[Path, Path] = {}
    for t in targets:
        if sidecar_path(t) not in written:
            written[sidecar_path(t)] = write_sidecar(prov, t)
    return list(written.values())


def _sorted(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _sorted(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [_sorted(v) for v in obj]
    return obj


def summary_lines(prov: Mapping) -> list[str]:
    """A few human lines: config hash, commit, model revisions (for footers of tables)."""
    git = prov.get("git", {})
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    lines = [f"config hash {prov.get('config_hash')} (sha256 {str(prov.get('config_sha256'))[:16]}…)",
             f"git commit {git.get('commit')}{dirty}"]
    for m in prov.get("models", []):
        where = m.get("hub_id") or m.get("model") or m.get("path") or m.get("source") or ""
        cks = m.get("checkpoints")
        def rev(d: Mapping) -> str:
            fp = d.get("fingerprint")
            return d.get("revision") or (f"files {fp[:12]}" if fp else "unversioned")

        revs = ", ".join(f"{c['name']}={rev(c)}" for c in cks) if cks else rev(m)
        lines.append(f"model {m['name']}" + (f" ({where})" if where else "") + f": {revs}")
    for p, h in (prov.get("inputs") or {}).items():
        lines.append(f"input {p}: sha256 {h[:16]}…")
    return lines
