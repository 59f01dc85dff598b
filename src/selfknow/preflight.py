"""`selfknow preflight CONFIG...`: what a launch of the config needs from outside, checked in
minutes before any job queues for hours.

- every openai-backend model: its credential (`api_key_env`) set, its endpoint answering the
  provider's model-list call (GET <base_url>/models) with that key, and listing the model when
  it lists any;
- every hf model with a local `path:` (or checkpoint paths): each path present;
- every hf model checkpoint: its hub id resolvable at its revision, from the local hub cache
  or (online) the hub;
- every dataset: a `path:` (and `possible_answer_path:`) present and readable by its loader,
  which checks the rows against the hub's row schema; a hub dataset resolvable at its revision
  with the installed `datasets`, which also refuses the loading scripts newer majors no longer
  run.

- for a run whose jobs run on cluster nodes (`cluster`: the workflow under a non-local executor,
  `--profile slurm`): no openai model served at a loopback address (localhost, 127.0.0.1, ::1),
  which on a job's node is that node, where no job of this workflow starts a server.

Every network check is bounded: the endpoints and the hub are asked at once, each for at most
`timeout_s` seconds (DNS included), and what has not answered by then is a problem naming the
URL; the hub's checks are then skipped, each named (with the hub answering, each of them is
bounded by `timeout_s` too). Without network preflight so ends within
`timeout_s` (10 s by default) plus its local checks.

One line per problem, each naming the config key (a model by its name), all of them before the
run stops. The workflow runs it before a launch of a
config with `preflight: true` (the Snakefile's `onstart`); SELFKNOW_SKIP_PREFLIGHT=1 or
`preflight: false` skips it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Hashable, Mapping
from urllib.parse import urlparse

SKIP_ENV = "SELFKNOW_SKIP_PREFLIGHT"
#: seconds each network check of preflight may take (`selfknow preflight --timeout`)
TIMEOUT_S = 10.0


def within(calls: Mapping[Hashable, Callable[[], object]], timeout_s: float) -> dict[Hashable, object]:
    """Each call's result, the calls run at once; a call still running `timeout_s` seconds after
    they started (a resolver or a server that never answers) gets None and is left to its
    daemon thread, which does not keep the process alive."""
    results: dict = {}
    threads = [threading.Thread(target=lambda k=k, fn=fn: results.__setitem__(k, fn()), daemon=True)
               for k, fn in calls.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {k: results.get(k) for k in calls}


def _silent(timeout_s: float) -> str:
    return f"no answer within {timeout_s:g} s"


def _error_within(fn: Callable[[], object], timeout_s: float) -> Exception | None:
    """The exception `fn()` raised, None when it returned, within `timeout_s`; a TimeoutError
    naming the bound when it had not."""
    def run():
        try:
            fn()
        except Exception as err:  # handed to the caller, which names the check
            return err
        return "done"

    got = within({"call": run}, timeout_s)["call"]
    return TimeoutError(_silent(timeout_s)) if got is None else None if got == "done" else got


def _model_key(m: dict, key: str) -> str:
    return f"models[{m['name']}].{key}"


def check_endpoints(config: dict, timeout_s: float) -> list[str]:
    """Credential and endpoint problems of the config's openai models; one request per
    (base_url, key) pair, all at once, each bounded by `timeout_s`."""
    from selfknow.models.providers import profile_name

    found, asks = [], {}  # per model in order: a problem line, or (model, url, what to ask)
    for m in config["models"]:
        if m["backend"] != "openai":
            continue
        key_env = m.get("api_key_env")
        key = os.environ.get(key_env) if key_env else None
        if key_env and not key:
            found.append(f"{_model_key(m, 'api_key_env')}: environment variable {key_env} is not set")
            continue
        url = m["base_url"].rstrip("/") + "/models"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if key and profile_name(m) == "anthropic":
            headers.update({"x-api-key": key, "anthropic-version": "2023-06-01"})
        asks.setdefault((url, key), lambda url=url, headers=headers, key_env=key_env:
                        _model_list(url, headers, key_env, timeout_s))
        found.append((m, url, (url, key)))
    listed = within(asks, timeout_s + 1)  # httpx's own timeout comes first; this also bounds DNS
    lines = [f if isinstance(f, str) else _endpoint_problem(f[0], f[1], listed[f[2]], timeout_s) for f in found]
    return [line for line in lines if line]


def _endpoint_problem(m: dict, url: str, got: set | tuple | None, timeout_s: float) -> str | None:
    """The problem line of model `m` given what its endpoint's model list gave (`_model_list`,
    None: no answer in time)."""
    if got is None:
        return f"{_model_key(m, 'base_url')}: {url} unreachable ({_silent(timeout_s)})"
    if isinstance(got, tuple):
        return f"{_model_key(m, got[0])}: {got[1]}"
    if got and m["model"] not in got:
        return f"{_model_key(m, 'model')}: {m['model']!r} is not among the models {url} lists"
    return None


def _model_list(url: str, headers: dict, key_env: str | None, timeout_s: float) -> set | tuple[str, str]:
    """The model ids `url` lists, or (config key, problem)."""
    import httpx

    try:
        resp = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        return "base_url", f"{url} unreachable ({_silent(timeout_s)})"
    except httpx.HTTPError as err:
        return "base_url", f"{url} unreachable ({type(err).__name__}: {err})"
    if resp.status_code in (401, 403):
        return "api_key_env", f"{url} refuses the key in {key_env} (HTTP {resp.status_code})"
    if resp.status_code >= 300:
        return "base_url", f"{url} answers HTTP {resp.status_code}"
    try:
        return {d.get("id") for d in resp.json().get("data") or []}
    except (ValueError, AttributeError):
        return set()


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")


def hub_down(timeout_s: float) -> str | None:
    """What could not be reached when the hub (`HF_ENDPOINT`) gives no answer, any HTTP status,
    within `timeout_s` (DNS included); None when it answers or HF_HUB_OFFLINE is set (the checks
    then read the local cache only)."""
    import httpx
    from huggingface_hub import constants

    if _offline():
        return None

    def probe():
        try:
            httpx.head(constants.ENDPOINT, timeout=timeout_s)
        except httpx.TimeoutException:
            return _silent(timeout_s)
        except httpx.HTTPError as err:
            return f"{type(err).__name__}: {err}"
        return ""

    got = within({"hub": probe}, timeout_s + 1)["hub"]
    return None if got == "" else f"the hub {constants.ENDPOINT} is unreachable ({got or _silent(timeout_s)})"


def check_hub_models(config: dict, down: str | None = None, timeout_s: float = TIMEOUT_S) -> list[str]:
    """hf model checkpoints whose hub id does not resolve at its revision, each hub request
    bounded by `timeout_s`; with the hub `down` (`hub_down`), those not in the local cache are
    named as not checked."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = _offline()
    problems = []
    for m in config["models"]:
        if m["backend"] != "hf" or "hub_id" not in m:
            continue
        for ck in m.get("checkpoints") or [{"name": "main", "revision": None}]:
            where = _model_key(m, f"checkpoints[{ck['name']}].revision") if m.get("checkpoints") \
                else _model_key(m, "hub_id")
            rev = ck.get("revision")
            try:
                snapshot_download(m["hub_id"], revision=rev, local_files_only=True)
                continue
            except (LocalEntryNotFoundError, HFValidationError, OSError):
                pass
            if offline:
                problems.append(f"{where}: {m['hub_id']}@{rev or 'main'} is not in the hub cache "
                                f"({os.environ.get('HF_HUB_CACHE', 'default cache')}) and HF_HUB_OFFLINE is set")
                continue
            if down:
                problems.append(f"{where}: {m['hub_id']}@{rev or 'main'} not checked: {down}")
                continue
            # the hub's errors: not found, gated, unreachable, no answer in time
            err = _error_within(lambda: HfApi().model_info(m["hub_id"], revision=rev), timeout_s)
            if err is not None:
                problems.append(f"{where}: {m['hub_id']}@{rev or 'main'}: {type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''}")
    return problems


def check_datasets(config: dict, down: str | None = None, timeout_s: float = TIMEOUT_S) -> list[str]:
    """Datasets whose local copy is missing or malformed, or whose hub copy does not resolve
    with the installed `datasets`; with the hub `down` (`hub_down`), the hub copies are named
    as not checked."""
    from selfknow.config import missing_path
    from selfknow.protocols.ladder.heldout import react_records
    from selfknow.stages.datasets.source import ItemError
    from selfknow.stages.items import SYNTHETIC_LOADERS, load_source

    problems = []
    for name, spec in config["datasets"].items():
        where = f"datasets.{name}"
        if spec["loader"].startswith("world_") or spec["loader"] in SYNTHETIC_LOADERS:
            continue  # generated by the workflow itself
        missing = [k for k in ("path", "possible_answer_path") if k in spec and not Path(spec[k]).exists()]
        problems += [missing_path(f"{where}.{k}", spec[k]) for k in missing]
        if missing:
            continue
        if "path" in spec:
            try:
                # recorded ReAct trajectories are no items: Table 34 reads them as records
                react_records(name, spec) if spec["loader"] == "react" else load_source(name, spec)
            except (ItemError, ValueError, KeyError, OSError) as err:
                problems.append(f"{where}.path: {err}")
            continue
        if down and not Path(spec["hub_id"]).exists():
            problems.append(f"{where}.hub_id: {spec['hub_id']}@{spec.get('revision')} not checked: {down}")
            continue
        problems += _hub_dataset(where, spec, timeout_s)
    return problems


def _hub_dataset(where: str, spec: dict, timeout_s: float) -> list[str]:
    try:
        import datasets
    except ImportError:
        return [f"{where}.hub_id: the `datasets` package is not installed (pip install -e '.[paper]')"]
    # datasets raises many kinds: missing, offline, script-based; or retries past the bound
    err = _error_within(lambda: datasets.load_dataset_builder(spec["hub_id"], spec.get("config_name"),
                                                              revision=spec.get("revision")), timeout_s)
    if err is not None:
        first = str(err).splitlines()[0] if str(err) else ""
        return [f"{where}.hub_id: {spec['hub_id']}@{spec.get('revision')} does not load with datasets "
                f"{datasets.__version__}: {type(err).__name__}: {first}"]
    return []


def check_served_here(config: dict) -> list[str]:
    """openai models served at a loopback address, for a run whose jobs run on cluster nodes:
    a job that calls one (each job of an API model alone goes to the partition of jobs without
    GPUs) reaches the node SLURM gave it, and no job of this workflow starts a server."""
    from selfknow import placement

    problems = []
    for m in config["models"]:
        host = urlparse(m.get("base_url", "")).hostname if m["backend"] == "openai" else None
        if host is None or not _loopback(host):
            continue
        where = placement.partition(int(m["gpu"])) or "the cluster's default partition"
        problems.append(f"{_model_key(m, 'base_url')}: {m['base_url']} is the node a job runs on, but its jobs "
                        f"run on cluster nodes ({where}), where no job starts this server: serve it once on a "
                        f"node of its own and name that host (docs/slurm.md, Servers)")
    return problems


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def preflight(config: dict, *, timeout_s: float = TIMEOUT_S, cluster: bool = False) -> list[str]:
    """Every problem line (module docstring) of a validated config; `cluster`: its jobs run on
    cluster nodes. The hub and the endpoints are asked at once: without network this ends
    within `timeout_s` + 1 s plus the local checks."""
    from selfknow.config import missing_model_paths

    hub: dict = {}
    probe = threading.Thread(target=lambda: hub.setdefault("down", hub_down(timeout_s)), daemon=True)
    probe.start()
    endpoints = check_endpoints(config, timeout_s)
    probe.join(timeout_s + 1)
    down = hub.get("down", f"the hub is unreachable ({_silent(timeout_s)})")
    return (endpoints + (check_served_here(config) if cluster else []) + missing_model_paths(config)
            + check_hub_models(config, down, timeout_s) + check_datasets(config, down, timeout_s))


def skipped(config: dict) -> bool:
    """Whether the automatic run before a launch is off (config key or environment)."""
    return not config.get("preflight") or os.environ.get(SKIP_ENV, "") not in ("", "0")


def preflight_or_stop(config: dict, *, cluster: bool = False) -> None:
    """The workflow's check before a launch (`cluster`: under a non-local executor): raise
    listing every problem, unless skipped."""
    if skipped(config):
        return
    problems = preflight(config, cluster=cluster)
    if problems:
        raise RuntimeError(f"preflight: {len(problems)} problem(s) (set {SKIP_ENV}=1 to launch anyway):\n"
                           + "\n".join(problems))
    print(f"preflight: no problem with {len(config['models'])} models and {len(config['datasets'])} datasets",
          file=sys.stderr)

