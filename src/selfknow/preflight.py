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

One line per problem, each naming the config key (a model by its name), all of them before the
run stops. The workflow runs it before a launch of a
config with `preflight: true` (the Snakefile's `onstart`); SELFKNOW_SKIP_PREFLIGHT=1 or
`preflight: false` skips it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

SKIP_ENV = "SELFKNOW_SKIP_PREFLIGHT"


def _model_key(m: dict, key: str) -> str:
    return f"models[{m['name']}].{key}"


def check_endpoints(config: dict, timeout_s: float) -> list[str]:
    """Credential and endpoint problems of the config's openai models; one request per
    (base_url, key) pair."""
    from selfknow.models.providers import profile_name

    problems, listed = [], {}
    for m in config["models"]:
        if m["backend"] != "openai":
            continue
        key_env = m.get("api_key_env")
        key = os.environ.get(key_env) if key_env else None
        if key_env and not key:
            problems.append(f"{_model_key(m, 'api_key_env')}: environment variable {key_env} is not set")
            continue
        url = m["base_url"].rstrip("/") + "/models"
        if (url, key) not in listed:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            if key and profile_name(m) == "anthropic":
                headers.update({"x-api-key": key, "anthropic-version": "2023-06-01"})
            listed[(url, key)] = _model_list(url, headers, key_env, timeout_s)
        got = listed[(url, key)]
        if isinstance(got, tuple):
            problems.append(f"{_model_key(m, got[0])}: {got[1]}")
        elif got and m["model"] not in got:
            problems.append(f"{_model_key(m, 'model')}: {m['model']!r} is not among the models {url} lists")
    return problems


def _model_list(url: str, headers: dict, key_env: str | None, timeout_s: float) -> set | tuple[str, str]:
    """The model ids `url` lists, or (config key, problem)."""
    import httpx

    try:
        resp = httpx.get(url, headers=headers, timeout=timeout_s)
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


def check_hub_models(config: dict) -> list[str]:
    """hf model checkpoints whose hub id does not resolve at its revision."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
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
            try:
                HfApi().model_info(m["hub_id"], revision=rev)
            except Exception as err:  # the hub's errors: not found, gated, unreachable
                problems.append(f"{where}: {m['hub_id']}@{rev or 'main'}: {type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''}")
    return problems


def check_datasets(config: dict) -> list[str]:
    """Datasets whose local copy is missing or malformed, or whose hub copy does not resolve
    with the installed `datasets`."""
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
        problems += _hub_dataset(where, spec)
    return problems


def _hub_dataset(where: str, spec: dict) -> list[str]:
    try:
        import datasets
    except ImportError:
        return [f"{where}.hub_id: the `datasets` package is not installed (pip install -e '.[paper]')"]
    try:
        datasets.load_dataset_builder(spec["hub_id"], spec.get("config_name"), revision=spec.get("revision"))
    except Exception as err:  # datasets raises many kinds: missing, offline, script-based
        first = str(err).splitlines()[0] if str(err) else ""
        return [f"{where}.hub_id: {spec['hub_id']}@{spec.get('revision')} does not load with datasets "
                f"{datasets.__version__}: {type(err).__name__}: {first}"]
    return []


def preflight(config: dict, *, timeout_s: float = 10.0) -> list[str]:
    """Every problem line (module docstring) of a validated config."""
    from selfknow.config import missing_model_paths

    return (check_endpoints(config, timeout_s) + missing_model_paths(config) + check_hub_models(config)
            + check_datasets(config))


def skipped(config: dict) -> bool:
    """Whether the automatic run before a launch is off (config key or environment)."""
    return not config.get("preflight") or os.environ.get(SKIP_ENV, "") not in ("", "0")


def preflight_or_stop(config: dict) -> None:
    """The workflow's check before a launch: raise listing every problem, unless skipped."""
    if skipped(config):
        return
    problems = preflight(config)
    if problems:
        raise RuntimeError(f"preflight: {len(problems)} problem(s) (set {SKIP_ENV}=1 to launch anyway):\n"
                           + "\n".join(problems))
    print(f"preflight: no problem with {len(config['models'])} models and {len(config['datasets'])} datasets",
          file=sys.stderr)

