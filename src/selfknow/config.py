"""Loading and validating the workflow config (schema at parse time, then cross-references).

Every error names the config file and the key path, e.g.
``config.yaml: models[1].backend: 'hff' is not one of ['hf', 'openai']``.
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"

#: datasets whose items the workflow builds itself (no `path`/`hub_id` needed)
WORLD_LOADERS = {"world_qa", "world_qa_heldout", "world_mcq"}
#: loaders that read a local file the user supplies
FILE_LOADERS = {"bioasq"}


class ConfigError(ValueError):
    """A config problem, with the file and key path in the message."""


def _key_path(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def load_schema() -> dict:
    with open(SCHEMA, encoding="utf-8") as f:
        return yaml.safe_load(f)


def validate_config(cfg: dict, source: str = "config") -> dict:
    """Check `cfg` against the schema and its cross-references; return it unchanged.

    Raises ConfigError with one message naming `source` and the offending key."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: the config must be a mapping, got {type(cfg).__name__}")
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        e = errors[0]
        if e.validator == "additionalProperties":
            extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
            where = _key_path(e.absolute_path)
            prefix = "" if where == "(top level)" else where + "."
            raise ConfigError(f"{source}: unknown key '{prefix}{extra[0]}' (a typo?); allowed here: "
                              f"{', '.join(sorted(e.schema.get('properties', {})))}")
        raise ConfigError(f"{source}: {_key_path(e.absolute_path)}: {e.message}")
    _check_references(cfg, source)
    return cfg


def _check_world(world: dict, source: str) -> None:
    """The world generator's and trainer's own keys, so a typo there stops the run too."""
    from selfknow.world.generator import DEFAULT_WORLD
    from selfknow.world.trainer import DEFAULT_FAMILY

    for k in world.get("generator", {}):
        if k not in DEFAULT_WORLD or k == "seed":
            raise ConfigError(f"{source}: unknown key 'world.generator.{k}' (a typo?); allowed here: "
                              f"{', '.join(sorted(set(DEFAULT_WORLD) - {'seed'}))}")
    for fam, fcfg in world["families"].items():
        for k in fcfg:
            if k not in DEFAULT_FAMILY:
                raise ConfigError(f"{source}: unknown key 'world.families.{fam}.{k}' (a typo?); allowed here: "
                                  f"{', '.join(sorted(DEFAULT_FAMILY))}")


def _check_references(cfg: dict, source: str) -> None:
    names: dict[str, int] = {}
    if "world" in cfg:
        _check_world(cfg["world"], source)
    families = (cfg.get("world") or {}).get("families", {})
    for i, m in enumerate(cfg["models"]):
        key = f"models[{i}]"
        if m["name"] in names:
            raise ConfigError(f"{source}: {key}.name: duplicate model name '{m['name']}' "
                              f"(also models[{names[m['name']]}])")
        names[m["name"]] = i
        if m["backend"] == "hf":
            src = m.get("source")
            if src == "world" and m["name"] not in families:
                raise ConfigError(f"{source}: {key}: source 'world' needs world.families.{m['name']}")
            if src is None and not (m.get("path") or m.get("hub_id")):
                raise ConfigError(f"{source}: {key}: missing path: an hf model needs 'path', 'hub_id' or 'source'")
            local = m.get("path")
            if local and not Path(local).exists():
                raise ConfigError(f"{source}: {key}.path: '{local}' does not exist")
            for j, c in enumerate(m.get("checkpoints", [])):
                if c.get("path") and not Path(c["path"]).exists():
                    raise ConfigError(f"{source}: {key}.checkpoints[{j}].path: '{c['path']}' does not exist")
            ck = [c["name"] for c in m.get("checkpoints", [])]
            if len(set(ck)) != len(ck):
                raise ConfigError(f"{source}: {key}.checkpoints: duplicate checkpoint names")
        else:
            for req in ("base_url", "model"):
                if req not in m:
                    raise ConfigError(f"{source}: {key}: an openai model needs '{req}'")
    for name, d in cfg["datasets"].items():
        if d["loader"] in FILE_LOADERS and "path" not in d:
            raise ConfigError(f"{source}: datasets.{name}: the {d['loader']} loader needs 'path'")
        if d["loader"] in WORLD_LOADERS and "world" not in cfg:
            raise ConfigError(f"{source}: datasets.{name}: loader {d['loader']} needs the 'world' section")
        if "domain_shard" in d and d["loader"] != "world_qa":
            raise ConfigError(f"{source}: datasets.{name}.domain_shard: only the world_qa loader has "
                              f"domains to shard, not {d['loader']}")

    def need_model(key: str, name: str) -> None:
        if name not in names:
            raise ConfigError(f"{source}: {key}: unknown model '{name}' (not in models)")

    def need_dataset(key: str, name: str) -> None:
        if name not in cfg["datasets"]:
            raise ConfigError(f"{source}: {key}: unknown dataset '{name}' (not in datasets)")

    if "judge" in cfg and "llm_judge" in cfg["judge"]:
        need_model("judge.llm_judge", cfg["judge"]["llm_judge"])
    if "audit_dataset" in cfg.get("judge", {}):
        need_dataset("judge.audit_dataset", cfg["judge"]["audit_dataset"])
    if "qa_dataset" in cfg.get("world", {}):
        need_dataset("world.qa_dataset", cfg["world"]["qa_dataset"])
    p = cfg.get("persistent")
    if p:
        for i, n in enumerate(p["models"]):
            need_model(f"persistent.models[{i}]", n)
            n_ck = len(checkpoint_names(cfg, n))
            if n_ck < p.get("train_checkpoints", 1) + 2:
                raise ConfigError(f"{source}: persistent.models[{i}]: '{n}' has {n_ck} checkpoints; "
                                  f"persistent needs train_checkpoints + at least 2 evaluation checkpoints")
        for i, n in enumerate(p["datasets"]):
            need_dataset(f"persistent.datasets[{i}]", n)
        if "transfer_dataset" in p:
            need_dataset("persistent.transfer_dataset", p["transfer_dataset"])
        if "gcm_model" in p:
            need_model("persistent.gcm_model", p["gcm_model"])
            gcm_backend = cfg["models"][names[p["gcm_model"]]]["backend"]
            if gcm_backend != "hf":
                raise ConfigError(f"{source}: persistent.gcm_model: '{p['gcm_model']}' is an "
                                  f"{gcm_backend} model; the GCM trains a LoRA "
                                  f"adapter on its weights, so it must be an hf model")
    lad = cfg.get("ladder")
    if lad:
        for i, n in enumerate(lad["models"]):
            need_model(f"ladder.models[{i}]", n)
        need_dataset("ladder.dataset", lad["dataset"])
        for k in ("llm_user_model", "prompted_model"):
            if k in lad:
                need_model(f"ladder.{k}", lad[k])
    lc = cfg.get("lcae")
    if lc:
        need_dataset("lcae.dataset", lc["dataset"])
        for i, n in enumerate(lc["examinee_models"]):
            need_model(f"lcae.examinee_models[{i}]", n)
        for n in lc.get("prices", {}):
            need_model(f"lcae.prices.{n}", n)


def load_config(path: str | Path) -> dict:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return validate_config(cfg, str(path))


def model_entry(cfg: dict, name: str) -> dict:
    for m in cfg["models"]:
        if m["name"] == name:
            return m
    raise ConfigError(f"unknown model '{name}'")


def checkpoint_names(cfg: dict, name: str) -> list[str]:
    """The ordered checkpoints of a model; a model without checkpoints has one, 'final'."""
    m = model_entry(cfg, name)
    if m.get("source") == "world":
        from selfknow.world.generator import DEFAULT_WORLD
        from selfknow.world.trainer import checkpoint_name

        n_phases = cfg["world"].get("generator", {}).get("n_phases", DEFAULT_WORLD["n_phases"])
        return [checkpoint_name(k) for k in range(n_phases)]
    return [c["name"] for c in m.get("checkpoints", [])] or ["final"]


def model_spec(cfg: dict, name: str, results: str = "results") -> dict:
    """The backend spec of a model, with the workflow-built paths filled in."""
    m = copy.deepcopy(model_entry(cfg, name))
    src = m.pop("source", None)
    if src == "world":
        m["path"] = f"{results}/world/models/{name}"
        m["checkpoints"] = [{"name": c, "path": f"{results}/world/models/{name}/{c}"}
                            for c in checkpoint_names(cfg, name)]
    elif src == "smollm2":
        m["path"] = f"{results}/models/smollm2"
    return m


def config_hash(obj: Any) -> str:
    """A short stable hash of a config fragment (provenance, cache keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
