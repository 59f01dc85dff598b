"""Loading and validating the workflow config (schema at parse time, then cross-references).

Every error names the config file and the key path, e.g.
``config.yaml: models[1].backend: 'hff' is not one of ['hf', 'openai']``.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import jsonschema
import yaml

from selfknow.schema import fill_defaults, load_schema, strict, subschema

#: datasets whose items the workflow builds itself (no `path`/`hub_id` needed)
WORLD_LOADERS = {"world_qa", "world_qa_heldout", "world_mcq"}
#: loaders that read a local file the user supplies
FILE_LOADERS = {"bioasq", "react"}


class ConfigError(ValueError):
    """A config problem, with the file and key path in the message."""


def _key_path(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def validate_config(cfg: dict, source: str = "config", *, check_paths: bool = True) -> dict:
    """Fill the schema's defaults into `cfg` (in place), check it against the schema and its
    cross-references, and return it as strict mappings (`selfknow.schema.ConfigSection`)
    that refuse to read a key the schema does not define. Without `check_paths` a model's
    local `path:` may be missing (preflight lists every missing one: `missing_model_paths`).

    Raises ConfigError with one message naming `source` and the offending key."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: the config must be a mapping, got {type(cfg).__name__}")
    _apply_stand_ins(cfg, source)
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
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
    fill_defaults(cfg, schema)
    _fill_derived_defaults(cfg)
    _check_references(cfg, source)
    missing = missing_model_paths(cfg) if check_paths else []
    if missing:
        raise ConfigError(f"{source}: {missing[0]}")
    _check_logprob_methods(cfg, source)
    return strict(cfg, schema)


def _apply_stand_ins(cfg: dict, source: str) -> None:
    """Resolve `stand_ins` (an overlay's {model name: the keys it changes}) in place: `models`
    keeps only the entries it names, in the base config's order, each updated by its mapping,
    where a key set to null is removed (the schema's default applies). An overlay thus repeats
    none of a base config's model settings, which Snakemake's merge could not give it: lists are
    replaced. Runs before the schema check of the whole config, so it checks its own key."""
    stand_ins = cfg.pop("stand_ins", None)
    if stand_ins is None:
        return
    if not jsonschema.Draft202012Validator(subschema("stand_ins")).is_valid(stand_ins):
        raise ConfigError(f"{source}: stand_ins: must map model names to mappings of the keys they change")
    models = cfg.get("models")
    names = [m.get("name") for m in models] if isinstance(models, list) else []
    unknown = [n for n in stand_ins if n not in names]
    if unknown:
        raise ConfigError(f"{source}: stand_ins.{unknown[0]}: no model of that name in models")
    if "name" in {k for v in stand_ins.values() for k in v}:
        raise ConfigError(f"{source}: stand_ins: a stand-in cannot rename its model")
    cfg["models"] = [{k: v for k, v in {**m, **stand_ins[m["name"]]}.items() if v is not None}
                     for m in models if m["name"] in stand_ins]


def _fill_derived_defaults(cfg: dict) -> None:
    """The defaults that are another key's value (each key's schema description says which)."""
    p = cfg.get("persistent")
    if p:
        p.setdefault("variance_seeds", p["seeds"])
        p.setdefault("bootstrap_ece_replicates", p["bootstrap_replicates"])
        p["gcm_training"] = {**p["adapter"], **p.get("gcm_training", {})}
        cfg["judge"].setdefault("audit_dataset", p["datasets"][0])
    if "world" in cfg:
        cfg["world"].setdefault("qa_dataset", p["datasets"][0] if p else "world_qa")
    if "ladder" in cfg:
        cfg["ladder"].setdefault("lsa_query_sessions", cfg["ladder"]["n_sessions"])


#: why a backend cannot give a kind of log-probability, by kind
_LOGPROB_HELP = {
    "beams": "an OpenAI-compatible API exposes no beams; use an hf model",
    "next_token": "set 'logprobs: true' if its server returns top_logprobs, or use an hf model",
    "label_scores": "only the hf backend scores label tokens after its rendered prompt",
    "loglikelihood": "set 'echo_logprobs: true' if its completions server returns prompt log-probabilities "
                     "with echo (vLLM), or use an hf model",
}


def _logprob_kinds(m: dict) -> set[str]:
    """The kinds of log-probabilities a model entry's backend gives (`_LOGPROB_HELP`)."""
    if m["backend"] == "hf":
        return set(_LOGPROB_HELP)
    return {k for k, on in (("next_token", m["logprobs"]), ("loglikelihood", m["echo_logprobs"])) if on}


def _check_logprob_methods(cfg: dict, source: str) -> None:
    """Stop at load, not mid-run, when a method that reads log-probabilities is given a model
    that has none. (LADDER and LCAE run every instruct model through generated text; a base
    model, `is_chat` false, answers and assesses by log-likelihoods there, and LCAE's
    tree-of-thought strategy branches over its beams.)"""
    models = {m["name"]: m for m in cfg["models"]}
    uses = []
    if "ladder" in cfg:
        uses += [(f"ladder.models[{i}]", name, "LADDER's cloze answers (option log-likelihoods)", "loglikelihood")
                 for i, name in enumerate(cfg["ladder"]["models"]) if not is_chat(models[name])]
    if "lcae" in cfg:
        for i, name in enumerate(cfg["lcae"]["examinee_models"]):
            if not is_chat(models[name]):
                uses.append((f"lcae.examinee_models[{i}]", name, "LCAE's base-model answers and assessments "
                             "(option and digit log-likelihoods)", "loglikelihood"))
                if "tot" in cfg["lcae"]["strategies"]:
                    uses.append((f"lcae.examinee_models[{i}]", name, "LCAE's tree-of-thought branches "
                                 "(lcae.strategies: tot)", "beams"))
    if "persistent" in cfg:
        for i, name in enumerate(cfg["persistent"]["models"]):
            uses += [(f"persistent.models[{i}]", name, "self-consistency over beam search", "beams"),
                     (f"persistent.models[{i}]", name, "verbalized confidence (digit log-probabilities)",
                      "next_token")]
    judge = cfg["judge"]
    if "llm_judge" in judge and ("constrained" in judge["audit_labels"] or (
            judge["correctness"] == "llm" and judge["labels"] == "constrained")):
        uses.append(("judge.llm_judge", judge["llm_judge"], "constrained judge labels", "label_scores"))
    for key, name, method, kind in uses:
        if kind not in _logprob_kinds(models[name]):
            raise ConfigError(f"{source}: {key}: model '{name}' ({models[name]['backend']}) has no "
                              f"log-probabilities for {method}: {_LOGPROB_HELP[kind]}")


def check_model_entry(m: dict, where: str, error: type[ConfigError] = ConfigError) -> None:
    """What the schema cannot state about one model entry (the config's, or a backend spec
    built from it); messages start with `where`."""
    names = [c["name"] for c in m.get("checkpoints", [])]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise error(f"{where}: checkpoint name '{twice[0]}' appears twice")
    if m["backend"] == "openai" and m["gpu"]:
        # the scheduler places a job by its models' GPUs (selfknow.placement): an API call holds none
        raise error(f"{where}: an openai model holds no GPU; 'gpu' must be 0, got {m['gpu']}")
    if m["backend"] == "hf" and m["device"] == "cuda" and not m["gpu"]:
        raise error(f"{where}: 'device: cuda' needs 'gpu' >= 1 (the GPUs its jobs ask the scheduler for)")
    if m["backend"] == "openai":
        for req in ("base_url", "model"):
            if req not in m:
                raise error(f"{where}: an openai model needs '{req}'")
        if m["echo_logprobs"] and m["mode"] != "completions":
            raise error(f"{where}: 'echo_logprobs: true' needs 'mode: completions'")
        if m["logprobs"] and m["mode"] == "responses":
            raise error(f"{where}: 'logprobs: true' needs 'mode: chat' or 'mode: completions' "
                        f"(log-probabilities are read from those answers)")
        if "chat" in m and m["chat"] != (m["mode"] != "completions"):
            # the endpoint fixes the prompt form: messages (chat, responses) or a raw prompt
            raise error(f"{where}: 'chat: {str(m['chat']).lower()}' contradicts 'mode: {m['mode']}' "
                        f"(chat prompts need mode chat or responses, raw prompts mode completions)")
        return
    every_ckpt_local = bool(names) and all("path" in c for c in m["checkpoints"])
    if "source" not in m and ("path" in m) == ("hub_id" in m) and not every_ckpt_local:
        raise error(f"{where}: missing path: an hf model needs exactly one of 'path', 'hub_id' or "
                    f"'source' (or a 'path' on every checkpoint)")


def missing_model_paths(cfg: dict) -> list[str]:
    """One problem line per local model `path:` (of the entry or a checkpoint) that does not
    exist, naming the model and checkpoint by name."""
    out = []
    for m in cfg["models"]:
        local = [("path", m["path"])] if "path" in m else []
        local += [(f"checkpoints[{c['name']}].path", c["path"]) for c in m.get("checkpoints", []) if "path" in c]
        out += [missing_path(f"models[{m['name']}].{k}", path) for k, path in local if not Path(path).exists()]
    return out


def missing_path(key: str, path: str) -> str:
    """The problem line of an input path that does not exist: its key and where it was looked
    for (a relative path in a config file was read from that file's folder)."""
    return f"{key}: {Path(path).absolute()} does not exist"


#: the keys that name files the researcher supplies ("*": every entry of a list or mapping)
INPUT_PATHS = (("models", "*", "path"), ("models", "*", "checkpoints", "*", "path"),
               ("stand_ins", "*", "path"), ("stand_ins", "*", "checkpoints", "*", "path"),
               ("datasets", "*", "path"), ("datasets", "*", "possible_answer_path"), ("ladder_import_dir",))


def _input_paths(cfg: dict) -> list[tuple[tuple, str]]:
    """(key, value) of every `INPUT_PATHS` entry a config mapping, merged or not, sets; a key
    is a tuple of mapping keys and list indices."""
    def walk(node, pattern, key):
        if not pattern:
            return [(key, node)] if isinstance(node, str) else []
        head, *rest = pattern
        if head != "*":
            children = [(head, node[head])] if isinstance(node, dict) and head in node else []
        else:
            children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        return [found for k, child in children for found in walk(child, rest, key + (k,))]

    return [found for pattern in INPUT_PATHS for found in walk(cfg, pattern, ())]


def resolve_paths(cfg: dict, configfiles) -> dict:
    """`cfg`, merged from `configfiles` (later files over earlier ones, then any values given
    on the command line), with each relative input path a file sets (a model's or checkpoint's
    `path:`, a dataset's `path:` and `possible_answer_path:`, `ladder_import_dir:`) read from
    that file's folder, as Docker Compose and DVC read the paths in their files; in place.
    A resolved path inside the working directory stays relative to it (rule params, and so
    reruns, do not depend on where the clone is); one outside becomes absolute. A path given
    on the command line (Snakemake's --config) and `results:`, which names where the workflow
    writes, as Snakemake's outputs, stay relative to the working directory."""
    origin = {}
    for f in configfiles:
        with open(f, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
        if isinstance(raw, dict):
            origin.update({key: (value, Path(f).absolute().parent) for key, value in _input_paths(raw)})
    for key, value in _input_paths(cfg):
        if key in origin and origin[key][0] == value and not os.path.isabs(value):
            path = Path(os.path.normpath(origin[key][1] / value))
            _set(cfg, key, str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path))
    return cfg


def rebase_paths(cfg: dict, folder: str | Path) -> dict:
    """`cfg`'s relative input paths (relative to the working directory) made relative to
    `folder`, for a config file written there; in place."""
    for key, value in _input_paths(cfg):
        if not os.path.isabs(value):
            _set(cfg, key, os.path.relpath(value, folder))
    return cfg


def _set(cfg: dict, key: tuple, value) -> None:
    *parents, last = key
    for k in parents:
        cfg = cfg[k]
    cfg[last] = value


class _Need:
    """The checks that a key names a model of the registry (`names`: name -> index) or one of
    its datasets, each failing with a ConfigError naming the key."""

    def __init__(self, cfg: dict, source: str, names: dict[str, int]):
        self.cfg, self.source, self.names = cfg, source, names

    def model(self, key: str, name: str) -> None:
        if name not in self.names:
            raise ConfigError(f"{self.source}: {key}: unknown model '{name}' (not in models)")

    def dataset(self, key: str, name: str) -> None:
        if name not in self.cfg["datasets"]:
            raise ConfigError(f"{self.source}: {key}: unknown dataset '{name}' (not in datasets)")


def _check_registry(cfg: dict, source: str) -> dict[str, int]:
    """The models' and datasets' own entries; the models' names -> their index."""
    names: dict[str, int] = {}
    families = cfg["world"]["families"] if "world" in cfg else {}
    for i, m in enumerate(cfg["models"]):
        key = f"models[{i}]"
        if m["name"] in names:
            raise ConfigError(f"{source}: {key}.name: duplicate model name '{m['name']}' "
                              f"(also models[{names[m['name']]}])")
        names[m["name"]] = i
        check_model_entry(m, f"{source}: {key}")
        if "source" in m and m["source"] == "world" and m["name"] not in families:
            raise ConfigError(f"{source}: {key}: source 'world' needs world.families.{m['name']}")
    for name, d in cfg["datasets"].items():
        if d["loader"] in FILE_LOADERS and "path" not in d:
            raise ConfigError(f"{source}: datasets.{name}: the {d['loader']} loader needs 'path'")
        if d["loader"] in WORLD_LOADERS and "world" not in cfg:
            raise ConfigError(f"{source}: datasets.{name}: loader {d['loader']} needs the 'world' section")
        if "domain_shard" in d and d["loader"] != "world_qa":
            raise ConfigError(f"{source}: datasets.{name}.domain_shard: only the world_qa loader has "
                              f"domains to shard, not {d['loader']}")
    return names


def _check_references(cfg: dict, source: str) -> None:
    need = _Need(cfg, source, _check_registry(cfg, source))
    if "llm_judge" in cfg["judge"]:
        need.model("judge.llm_judge", cfg["judge"]["llm_judge"])
        if "audit_dataset" not in cfg["judge"]:
            raise ConfigError(f"{source}: judge.audit_dataset: the judge audit needs a dataset "
                              f"(without persistent.datasets there is none to default to)")
    if "audit_dataset" in cfg["judge"]:
        need.dataset("judge.audit_dataset", cfg["judge"]["audit_dataset"])
    if "world" in cfg:
        need.dataset("world.qa_dataset", cfg["world"]["qa_dataset"])
    if "persistent" in cfg:
        _check_persistent(cfg, source, need)
    if "ladder" in cfg:
        _check_ladder(cfg, source, need)
    if "lcae" in cfg:
        lc = cfg["lcae"]
        need.dataset("lcae.dataset", lc["dataset"])
        for i, n in enumerate(lc["examinee_models"]):
            need.model(f"lcae.examinee_models[{i}]", n)
        for n in lc["prices"]:
            need.model(f"lcae.prices.{n}", n)


def _check_persistent(cfg: dict, source: str, need: _Need) -> None:
    p = cfg["persistent"]
    for i, n in enumerate(p["models"]):
        need.model(f"persistent.models[{i}]", n)
        n_ck = len(checkpoint_names(cfg, n))
        if n_ck < p["train_checkpoints"] + 2:
            raise ConfigError(f"{source}: persistent.models[{i}]: '{n}' has {n_ck} checkpoints; "
                              f"persistent needs train_checkpoints + at least 2 evaluation checkpoints")
    for i, n in enumerate(p["datasets"]):
        need.dataset(f"persistent.datasets[{i}]", n)
    if "transfer_dataset" in p:
        need.dataset("persistent.transfer_dataset", p["transfer_dataset"])
    if "gcm_model" in p:
        need.model("persistent.gcm_model", p["gcm_model"])
        gcm_backend = cfg["models"][need.names[p["gcm_model"]]]["backend"]
        if gcm_backend != "hf":
            raise ConfigError(f"{source}: persistent.gcm_model: '{p['gcm_model']}' is an "
                              f"{gcm_backend} model; the GCM is a LoRA "
                              f"adapter on its weights, so it must be an hf model")
    if "gcm_adapter" in p and "gcm_model" not in p:
        raise ConfigError(f"{source}: persistent.gcm_adapter needs persistent.gcm_model (its backbone)")


def _check_ladder(cfg: dict, source: str, need: _Need) -> None:
    lad = cfg["ladder"]
    for i, n in enumerate(lad["models"]):
        need.model(f"ladder.models[{i}]", n)
    need.dataset("ladder.dataset", lad["dataset"])
    if "react_dataset" in lad:
        need.dataset("ladder.react_dataset", lad["react_dataset"])
        if cfg["datasets"][lad["react_dataset"]]["loader"] != "react":
            raise ConfigError(f"{source}: ladder.react_dataset: dataset '{lad['react_dataset']}' has loader "
                              f"{cfg['datasets'][lad['react_dataset']]['loader']!r}; Table 34 needs loader react")
    if "react" in lad:
        need.dataset("ladder.react.dataset", lad["react"]["dataset"])
        names_seen = set()
        for i, c in enumerate(lad["react"]["configurations"]):
            need.model(f"ladder.react.configurations[{i}].model", c["model"])
            if c["name"] in names_seen:
                raise ConfigError(f"{source}: ladder.react.configurations[{i}]: a second configuration "
                                  f"named '{c['name']}'")
            names_seen.add(c["name"])
    for k in ("llm_user_model", "prompted_model"):
        if k in lad:
            need.model(f"ladder.{k}", lad[k])
    # per-model entries for models outside the panel are kept unused (one table serves a
    # smaller panel, as the rehearsal's)
    for m, user in lad.get("user_models", {}).items():
        if m in lad["models"]:
            need.model(f"ladder.user_models.{m}", user)
    for m, tiers in lad.get("tiers", {}).items():
        listed = [d for t in ("strong", "mid", "weak") for d in tiers[t]]
        if len(set(listed)) != len(listed):
            dup = next(d for d in listed if listed.count(d) > 1)
            raise ConfigError(f"{source}: ladder.tiers.{m}: domain '{dup}' is in more than one tier")
    _check_ladder_tasks(cfg, source, need)


def _check_ladder_tasks(cfg: dict, source: str, need: _Need) -> None:
    """The extension tasks (Table 32) and the cross-task suites (Tables 14-15)."""
    lad = cfg["ladder"]
    if "extension" in lad:
        ext = lad["extension"]
        for i, n in enumerate(ext["models"]):
            need.model(f"ladder.extension.models[{i}]", n)
        for task in ("gsm8k", "humaneval", "bfcl"):
            key, name = f"ladder.extension.{task}.dataset", ext[task]["dataset"]
            need.dataset(key, name)
            loader = cfg["datasets"][name]["loader"]
            if loader not in (task, f"synthetic_{task}"):
                raise ConfigError(f"{source}: {key}: dataset '{name}' has loader {loader!r}; the {task} task "
                                  f"needs loader {task} or synthetic_{task}")
    if "cross_task" in lad:
        ct = lad["cross_task"]
        for i, n in enumerate(ct["models"]):
            need.model(f"ladder.cross_task.models[{i}]", n)
            if ct["prior"] == "l1" and n not in lad["models"]:
                raise ConfigError(f"{source}: ladder.cross_task.models[{i}]: prior 'l1' reads the L1 prior of "
                                  f"'{n}', which is not in ladder.models")
        # what each suite's items may be: the benchmark's own rows, or the world's analogue
        allowed = {"mmlu_pro": ("mmlu_pro", "world_mcq"), "bbh": ("bbh", "world_qa", "world_qa_heldout")}
        for suite, sc in ct["suites"].items():
            for i, name in enumerate(sc["datasets"]):
                need.dataset(f"ladder.cross_task.suites.{suite}.datasets[{i}]", name)
            loaders = sorted({cfg["datasets"][n]["loader"] for n in sc["datasets"]})
            if len(loaders) != 1 or loaders[0] not in allowed[suite]:
                raise ConfigError(f"{source}: ladder.cross_task.suites.{suite}.datasets: loaders {loaders}; "
                                  f"the suite needs one loader of {list(allowed[suite])}")


def load_config(path: str | Path, *, check_paths: bool = True) -> dict:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if isinstance(cfg, dict):
        resolve_paths(cfg, [path])
    return validate_config(cfg, str(path), check_paths=check_paths)


def is_chat(spec: dict) -> bool:
    """Whether a model is prompted through its chat template (an instruct model) or with raw
    prompts (a base model, to LADDER and LCAE too): its entry's `chat` when set; otherwise an
    openai model unless its `mode` (default: the schema's) is the raw-prompt `completions`
    endpoint, and never an hf model. Both backends take their default from here."""
    if "chat" in spec:
        return bool(spec["chat"])
    if spec["backend"] != "openai":
        return False
    return (spec["mode"] if "mode" in spec else subschema("models.*.mode")["default"]) != "completions"


def stated_by(config: Mapping, models: Sequence[str]) -> dict[str, str]:
    """Who states each model's prompted levels (ZS, LSA, GT-SelfStats): a chat model itself,
    a base LM the configured `ladder.prompted_model`."""
    specs = {m["name"]: m for m in config["models"]}
    prompted = config["ladder"].get("prompted_model") or ""
    return {m: m if m not in specs or is_chat(specs[m]) else (prompted or m) for m in models}


def model_entry(cfg: dict, name: str) -> dict:
    for m in cfg["models"]:
        if m["name"] == name:
            return m
    raise ConfigError(f"unknown model '{name}'")


def checkpoint_name(phase_index: int) -> str:
    """Directory name of the world checkpoint saved at the end of curriculum phase
    ``phase_index`` (0-based): ``"phase1"``, ``"phase2"``, ... Known from the config before
    training, so the workflow can name its outputs up front."""
    if int(phase_index) < 0:
        raise ValueError(f"checkpoint_name: phase_index must be >= 0, got {phase_index}")
    return f"phase{int(phase_index) + 1}"


def checkpoint_names(cfg: dict, name: str) -> list[str]:
    """The ordered checkpoints of a model; a model without checkpoints has one, 'final'."""
    m = model_entry(cfg, name)
    if m.get("source") == "world":
        return [checkpoint_name(k) for k in range(cfg["world"]["generator"]["n_phases"])]
    return [c["name"] for c in m.get("checkpoints", [])] or ["final"]


#: model entry keys only `selfknow plan` reads: left out of the backend spec, which rules carry
#: as params, so that a new price or estimate reruns no job
PLAN_ONLY_KEYS = ("price", "unpriced", "reasoning_estimate")


def model_spec(cfg: dict, name: str, results: str = "results") -> dict:
    """The backend spec of a model, with the workflow-built paths filled in."""
    m = copy.deepcopy(model_entry(cfg, name))
    for key in PLAN_ONLY_KEYS:
        m.pop(key, None)
    src = m.pop("source", None)
    if src == "world":
        m["path"] = f"{results}/world/models/{name}"
        m["checkpoints"] = [{"name": c, "path": f"{results}/world/models/{name}/{c}"}
                            for c in checkpoint_names(cfg, name)]
    elif src == "smollm2":
        m["path"] = f"{results}/models/smollm2"
    return m


def _strings(node) -> Iterator[str]:
    """Every string value in a config node, at any depth."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def job_config(cfg: dict, *, sections: Sequence[str] = (), models: Sequence[str] = (),
               datasets: Sequence[str] = (), narrow: Mapping[str, Mapping] | None = None) -> dict:
    """The part of the workflow config a job reads, for its rule's params (a job never gets the
    whole config, so a setting reruns only the jobs that read it): the named top-level
    `sections`, with the keys `narrow` gives a section replaced (a per-model job's section
    lists its own model only, so that another model's addition does not rerun it); the
    registry entries of `models`, `datasets` and of every model or dataset a section names;
    the seed and the results directory; and the world's phase count where a world model is
    among them (its checkpoints' names, `checkpoint_names`)."""
    missing = [s for s in sections if s not in cfg]
    if missing:
        raise ConfigError(f"job_config: the config has no section {missing}")
    narrow = narrow or {}
    picked = {s: {**cfg[s], **narrow[s]} if s in narrow else cfg[s] for s in sections}
    named = set(_strings(list(picked.values())))
    want_models = set(models) | named
    want_datasets = set(datasets) | named
    out = {"seed": cfg.get("seed"), "results": cfg.get("results", "results"), **picked,
           "models": [m for m in cfg["models"] if m["name"] in want_models],
           "datasets": {d: v for d, v in cfg.get("datasets", {}).items() if d in want_datasets}}
    if "world" not in out and any(m.get("source") == "world" for m in out["models"]):
        out["world"] = {"generator": {"n_phases": cfg["world"]["generator"]["n_phases"]}}
    return out


def config_hash(obj: Any) -> str:
    """A short stable hash of a config fragment (provenance, cache keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
