# Config validation, the global wildcard constraints and the input functions.
import re

from snakemake.exceptions import WorkflowError

from selfknow.config import (
    ConfigError,
    checkpoint_names,
    config_hash,
    model_spec,
    validate_config,
)

try:
    validate_config(config, source=", ".join(map(str, workflow.configfiles)) or "config")
except ConfigError as err:
    raise WorkflowError(str(err)) from None

R = config.get("results", "results")
MODELS = [m["name"] for m in config["models"]]
DATASETS = list(config["datasets"])
CHECKPOINTS = sorted({c for m in MODELS for c in checkpoint_names(config, m)})


def _alt(values):
    return "|".join(sorted(re.escape(v) for v in values)) or "NONE"


wildcard_constraints:
    model=_alt(MODELS),
    ckpt=_alt(CHECKPOINTS),
    dataset=_alt(DATASETS),
    split="train|test",
    family=_alt((config.get("world") or {}).get("families", {})),


def get_model_spec(wildcards):
    """The backend spec of one model: a rule's params carry only this model's entry, so
    editing another model never reruns this model's jobs."""
    return model_spec(config, wildcards.model, R)


def _model_entry(name):
    return next(m for m in config["models"] if m["name"] == name)


def get_model_gpus(wildcards):
    """GPUs a job that loads this model asks the scheduler for (config `gpu`, default 0)."""
    return _model_entry(wildcards.model).get("gpu", 0)


def get_model_mem_mb(wildcards):
    return _model_entry(wildcards.model).get("mem_mb", 4000)


def model_files(name):
    """What a job that loads model `name` needs built first (world families, converted GGUF)."""
    src = _model_entry(name).get("source")
    if src == "world":
        return [f"{R}/world/models/{name}"]
    if src == "smollm2":
        return [f"{R}/models/smollm2"]
    return []


def get_model_files(wildcards):
    return model_files(wildcards.model)


def get_family_config(wildcards):
    return config["world"]["families"][wildcards.family]


def get_dataset_inputs(wildcards):
    """World datasets are built from the generated world; others load from their source."""
    loader = config["datasets"][wildcards.dataset]["loader"]
    return [f"{R}/world/data/qa.parquet", f"{R}/world/data/mcq.parquet"] if loader.startswith("world_") else []


def get_dataset_spec(wildcards):
    return config["datasets"][wildcards.dataset]


def table_targets(paper, names):
    return [f"{R}/tables/{paper}/{n}.{ext}" for n in names for ext in ("csv", "md")]


def named_table_targets(paper, names):
    """Table outputs named "<table>_csv" / "<table>_md", for `output: **named_table_targets(...)`."""
    return {f"{n}_{ext}": f"{R}/tables/{paper}/{n}.{ext}" for n in names for ext in ("csv", "md")}


def all_table_files():
    files = []
    if "world" in config:
        files += table_targets("world", ["evolution"])
    if config.get("judge", {}).get("llm_judge"):
        files += table_targets("judge", ["audit"])
    if "persistent" in config:
        files += persistent_table_files()
    if "ladder" in config or "ladder_import_dir" in config:
        files += ladder_table_files()
    if any(k in config for k in ("lcae", "ladder", "persistent")):
        files += table_targets("card", ["self_knowledge"])
    if "lcae" in config:
        files += table_targets("lcae", ["table1", "table2", "table3", "item_fit"])
        files.append(f"{R}/figures/lcae/figure2.png")
    return files


WORLD = config.get("world", {})


def world_models():
    return [m for m in MODELS if _model_entry(m).get("source") == "world"]


def get_world_generations(wildcards):
    ds = config.get("persistent", {}).get("datasets", ["world_qa"])[0]
    return {f"{m}@{c}": f"{R}/generations/{m}/{c}/greedy/{ds}.parquet"
            for m in world_models() for c in checkpoint_names(config, m)}


JUDGE = config.get("judge", {})


AUDIT_DATASET = config.get("persistent", {}).get("datasets", ["NONE"])[0]


def get_audit_generations(wildcards):
    """The last checkpoint of every persistent-protocol model on its first short-answer dataset."""
    return [f"{R}/generations/{m}/{checkpoint_names(config, m)[-1]}/greedy/{AUDIT_DATASET}.parquet"
            for m in config.get("persistent", {}).get("models", [])]


def get_judge_model_files(wildcards):
    return model_files(JUDGE["llm_judge"])


def get_judge_spec(wildcards):
    return model_spec(config, JUDGE["llm_judge"], R)


LC = config.get("lcae", {})


def lcae_examinees():
    """(model, checkpoint) pairs; each is answered under every strategy (one examinee each)."""
    return [(m, c) for m in LC.get("examinee_models", []) for c in checkpoint_names(config, m)]


def lcae_files(stage):
    return [f"{R}/lcae/{stage}/{m}/{c}.parquet" for m, c in lcae_examinees()]


def get_card_inputs(wildcards):
    """Each protocol's per-model outputs that this config produces."""
    out = {}
    if "lcae" in config:
        out["lcae_persons"] = f"{R}/lcae/irt/persons.parquet"
        out["lcae_stage3"] = f"{R}/lcae/stage3.parquet"
    if "ladder" in config:
        out["ladder_main"] = f"{R}/tables/ladder/main.csv"
    for m in config.get("persistent", {}).get("models", []):
        base = f"{R}/persistent/metrics/{m}/{config['persistent']['datasets'][0]}/main"
        out[f"persistent_points__{m}"] = f"{base}.parquet"
        out[f"persistent_reps__{m}"] = f"{base}.replicates.npz"
    return out


def card_last_checkpoints():
    return {m: checkpoint_names(config, m)[-1] for m in MODELS}
