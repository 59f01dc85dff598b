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
import signal
import subprocess
import sys
import tempfile
import time
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

    from selfknow.config import resolve_paths, validate_config

    cfg: dict = {}
    for f in configfiles:
        with open(f, encoding="utf-8") as fh:
            update_config(cfg, yaml.safe_load(fh))
    validate_config(resolve_paths(cfg, configfiles), " + ".join(map(str, configfiles)), check_paths=check_paths)
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


def resolved_config(configfiles, port: int, url: str, folder: Path = STAND_INS) -> dict:
    """The config of `configfiles` merged as Snakemake merges them, unvalidated (so that
    Snakemake validates it as it would the files), with every base_url on 127.0.0.1:`port`
    pointing at the stand-in server's `url` instead, and its relative paths relative to
    `folder`, where it is written."""
    from snakemake.utils import update_config

    from selfknow.config import rebase_paths, resolve_paths

    cfg: dict = {}
    for f in configfiles:
        with open(f, encoding="utf-8") as fh:
            update_config(cfg, yaml.safe_load(fh))
    rebase_paths(resolve_paths(cfg, configfiles), folder)

    def point(obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key == "base_url" and isinstance(value, str):
                    parts = urlsplit(value)
                    if (parts.hostname, parts.port) == ("127.0.0.1", port):
                        obj[key] = url
                else:
                    point(value)
        elif isinstance(obj, list):
            for value in obj:
                point(value)

    point(cfg)
    return cfg


def start_server(config: dict) -> StandInServer:
    """The stand-in server for the config's API models: on the port of their base_url when it
    is free (a rerun then sends every job the params it had, so Snakemake reruns none for a new
    URL), else on a free port, so that two rehearsals run side by side."""
    port, models, reasoning = api_endpoint(config)
    try:
        return StandInServer(models, reasoning, port=port, providers=api_providers(config))
    except OSError:
        return StandInServer(models, reasoning, port=0, providers=api_providers(config))


class Stopped(Exception):
    """SIGTERM or SIGINT reached the rehearsal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` is still running. Zombies do not count: a container's
    init may never reap them, and they hold nothing."""
    if not Path("/proc/self/stat").exists():
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # the process ended while we looked
        if group == str(pgid) and state != "Z":
            return True
    return False


def stop_group(proc: subprocess.Popen, signum: int, grace_s: float = 30.0) -> None:
    """Send `signum` to the process group `proc` leads (Snakemake and every job it started),
    wait up to `grace_s` for all of them to end, then kill what is left."""
    for sig, wait_s in ((signum, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.2)
    proc.wait(10)


def run_stoppable(cmd: list[str], env: dict) -> int:
    """Run `cmd` in its own process group and return its exit status; on SIGTERM or SIGINT,
    stop the whole group (what Snakemake started too) and return 128 + the signal number."""
    def stop(signum, frame):
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    proc = None
    try:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        return proc.wait()
    except Stopped as err:
        for s in previous:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        if proc is not None:
            stop_group(proc, err.signum)
        return 128 + err.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def rehearse(*, results: str | None, cores: int, configfiles=CONFIGFILES, snakemake_args=()) -> int:
    """Run the rehearsal in the current directory (the workflow's root); Snakemake's exit
    status, or 128 + the signal number when SIGTERM or SIGINT stopped it (Snakemake, its jobs
    and the server stopped with it)."""
    if not Path("Snakefile").exists():
        raise FileNotFoundError("run `selfknow rehearse` in the workflow's root (no Snakefile here)")
    config = load_config(configfiles)
    cache = build_stand_ins(config)
    port = api_endpoint(config)[0]
    server = start_server(config)
    resolved = None
    try:
        # the server's URL in the config Snakemake reads: a rehearsal beside another one runs
        # on another port
        fd, name = tempfile.mkstemp(prefix="config-", suffix=".yaml", dir=STAND_INS)
        resolved = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(resolved_config(configfiles, port, server.url), f, sort_keys=False)
        print(f"rehearse: stand-in API server on {server.url}; config {resolved}", file=sys.stderr, flush=True)
        # the target first: --configfile and --config take every value after them
        cmd = [sys.executable, "-m", "snakemake", "all_tables", *snakemake_args, "--profile", "profiles/local",
               "--cores", str(cores), "--configfile", str(resolved)]
        if results:
            cmd += ["--config", f"results={results}"]
        return run_stoppable(cmd, environment(config, cache))
    finally:
        server.close()
        if resolved is not None:
            resolved.unlink(missing_ok=True)
