"""`selfknow rehearse`: build the stand-ins, start the stand-in API server, run Snakemake on
`config/paper.yaml` + `config/rehearsal.yaml` offline, and stop the server whatever happens.

The stand-ins live under `.rehearsal/` in the working directory (the dataset fixtures at the
`path:` of each dataset of the rehearsal config, the hub cache in `.rehearsal/hf`). They are
rebuilt only when what they depend on changes (the config's datasets, hub models, sizes and
seed, and the code of `data` and `hub`): a fingerprint is written last, so an interrupted build is
redone.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from selfknow.config import config_hash

from . import data, hub
from .server import StandInServer

CONFIGFILES = ("config/paper.yaml", "config/rehearsal.yaml")
STAND_INS = Path(".rehearsal")
API_KEY = "rehearsal-key"


def load_config(configfiles=CONFIGFILES, *, check_paths: bool = True) -> dict:
    """The config Snakemake builds from `configfiles` (later files merged over earlier ones:
    mappings key by key, lists replaced), validated (`validate_config`), with the schema's
    defaults filled in."""
    from snakemake.utils import update_config

    from selfknow.config import validate_config

    cfg: dict = {}
    for f in configfiles:
        with open(f, encoding="utf-8") as fh:
            update_config(cfg, yaml.safe_load(fh))
    validate_config(cfg, " + ".join(map(str, configfiles)), check_paths=check_paths)
    return cfg


def _fingerprint(config: dict) -> str:
    sources = [Path(data.__file__), Path(hub.__file__)]
    wanted = {"seed": config["seed"], "datasets": config["datasets"], "hub": hub.hub_models(config),
              "adapters": hub.hub_adapters(config),
              "n_test": config["persistent"]["n_test"], "n_items": config["lcae"]["n_items"],
              "code": [hashlib.sha256(p.read_bytes()).hexdigest() for p in sources]}
    return config_hash(wanted)


def build_stand_ins(config: dict, root: Path = STAND_INS) -> Path:
    """Write the dataset fixtures and the hub cache (`root/hf`) for `config` unless the ones
    there are up to date; returns the hub cache directory."""
    cache, marker = root / "hf", root / "stand-ins.sha256"
    fingerprint = _fingerprint(config)
    if marker.exists() and marker.read_text().strip() == fingerprint:
        return cache
    marker.unlink(missing_ok=True)
    shutil.rmtree(cache, ignore_errors=True)
    paths = data.build(config)
    hub.build(config, cache, data.corpus(paths))
    marker.write_text(fingerprint + "\n")
    return cache


def api_endpoint(config: dict) -> tuple[int, list[str], list[str]]:
    """(port, served model names, reasoning model names) of the config's openai models, which
    must all point at one stand-in server on 127.0.0.1."""
    api = [m for m in config["models"] if m["backend"] == "openai"]
    hosts = {(urlsplit(m["base_url"]).hostname, urlsplit(m["base_url"]).port) for m in api}
    if len(hosts) != 1 or next(iter(hosts))[0] != "127.0.0.1" or next(iter(hosts))[1] is None:
        raise ValueError(f"the rehearsal's openai models must all use one http://127.0.0.1:<port>/v1 "
                         f"base_url, got {sorted(m['base_url'] for m in api)}")
    reasoning = [m["model"] for m in api if m.get("request_preset") == "openai_reasoning"]
    return next(iter(hosts))[1], [m["model"] for m in api], reasoning


def api_providers(config: dict) -> dict[str, str]:
    """{served model name: provider profile} of the config's openai models: the rules the
    stand-in server answers each with (selfknow.rehearsal.provider_rules)."""
    from selfknow.models.providers import profile_name

    return {m["model"]: profile_name(m) for m in config["models"] if m["backend"] == "openai"}


def environment(config: dict, cache: Path) -> dict:
    """The jobs' environment: the hub cache, offline, and a key in every `api_key_env`."""
    env = dict(os.environ, HF_HUB_CACHE=str(cache.resolve()), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    for m in config["models"]:
        if "api_key_env" in m:
            env[m["api_key_env"]] = API_KEY
    return env


def rehearse(*, results: str | None, cores: int, configfiles=CONFIGFILES, snakemake_args=()) -> int:
    """Run the rehearsal in the current directory (the workflow's root); Snakemake's exit
    status."""
    if not Path("Snakefile").exists():
        raise FileNotFoundError("run `selfknow rehearse` in the workflow's root (no Snakefile here)")
    config = load_config(configfiles)
    cache = build_stand_ins(config)
    port, models, reasoning = api_endpoint(config)
    # the target first: --configfile and --config take every value after them
    cmd = [sys.executable, "-m", "snakemake", "all_tables", *snakemake_args, "--profile", "profiles/local",
           "--cores", str(cores), "--configfile", *configfiles]
    if results:
        cmd += ["--config", f"results={results}"]
    try:
        server = StandInServer(models, reasoning, port=port, providers=api_providers(config))
    except OSError as err:
        raise ValueError(f"cannot start the stand-in API server on 127.0.0.1:{port} "
                         f"(the port of config/rehearsal.yaml's base_url): {err}") from None
    try:
        return subprocess.run(cmd, env=environment(config, cache), check=False).returncode
    finally:
        server.close()
