# Config validation, the global wildcard constraints and the input functions.
import os
import re

from snakemake.exceptions import WorkflowError

from selfknow import placement

from selfknow.config import (
    ConfigError,
    checkpoint_names,
    config_hash,
    is_chat,
    job_config,
    model_spec,
    resolve_paths,
    validate_config,
)

# Each paper's catalog of tables and figures (protocols/<paper>/catalog.py).
from selfknow.report.catalog import CARD_CATALOG, JUDGE_CATALOG, WORLD_CATALOG, caption_text, names
from selfknow.catalogs import REPORT as REPORT_CATALOG
from selfknow.catalogs import table_files
from selfknow.protocols.ladder.catalog import CATALOG as LADDER
from selfknow.protocols.ladder.catalog import TABLES as LADDER_CATALOG
from selfknow.protocols.lcae.catalog import TABLES as LCAE_CATALOG

# Typed named inputs. Where a job must know which input file is which, one function returns
# a key -> path mapping; `input` takes its paths, `params` the mapping itself.
from selfknow.protocols.persistent.inputs import input_paths, paths_of

# Path templates (selfknow.paths, selfknow.protocols.<paper>.paths): one per file, for the
# rules' outputs and the input functions alike.
from selfknow import paths as SP
from selfknow.protocols.ladder import paths as LDP
from selfknow.protocols.lcae import paths as LP

try:
    # a relative input path is read from the folder of the config file that sets it
    _CHECKED = validate_config(resolve_paths(config, workflow.configfiles),
                               source=", ".join(map(str, workflow.configfiles)) or "config")
except ConfigError as err:
    raise WorkflowError(str(err)) from None
# Defaults filled in and every section strict (a read of a key the schema does not define
# fails), both for the jobs (their `config`) and, top level included, for the rules.
config.update(_CHECKED)
config = _CHECKED

R = config["results"]


def rpath(template, **values):
    """A path template under `results`, the fields `values` name filled in, the others kept
    as wildcards."""
    return f"{R}/{SP.fill(template, **values)}"

MODELS = [m["name"] for m in config["models"]]
DATASETS = list(config["datasets"])
CHECKPOINTS = sorted({c for m in MODELS for c in checkpoint_names(config, m)})

# Rendering-only settings (config `report`): only the rules that write tables and figures
# take them as params, so changing one reruns those jobs and nothing else.
REPORT_SETTINGS = config["report"]


def _alt(values):
    return "|".join(sorted(re.escape(v) for v in values)) or "NONE"


wildcard_constraints:
    model=_alt(MODELS),
    ckpt=_alt(CHECKPOINTS),
    dataset=_alt(DATASETS),
    split="train|test",
    family=_alt(config["world"]["families"] if "world" in config else []),


def get_model_spec(wildcards):
    """The backend spec of one model: a rule's params carry only this model's entry, so
    editing another model never reruns this model's jobs."""
    return model_spec(config, wildcards.model, R)


def _model_entry(name):
    return next(m for m in config["models"] if m["name"] == name)


def model_resources(*spec_getters, runtime, bases=None, scratch_mb=None):
    """The scheduler resources of a job that loads models, for `resources: **model_resources(...)`:
    `spec_getters` are the input functions that hand the job its model specs
    (wildcards -> spec, or None when the job does not load that one), `bases` (wildcards -> int)
    the copies of the first model's base weights it keeps resident, `scratch_mb` (wildcards ->
    int) the node-local disk it writes to $TMPDIR (disk_mb, sbatch --tmp). GPUs, memory,
    partition and GPU type follow from them in one place (selfknow.placement), so a rule that
    declares what it loads is placed by construction; `runtime` is the rule's wall time in
    minutes (or wildcards -> minutes)."""

    def loads(wildcards):
        out = []
        for i, get in enumerate(spec_getters):
            spec = get(wildcards)
            if spec is not None and all(spec["name"] != s["name"] for s, _ in out):
                out.append((spec, bases(wildcards) if bases is not None and i == 0 else 1))
        return out

    return dict(
        mem_mb=lambda wildcards: placement.job_mem_mb(loads(wildcards)),
        gpu=lambda wildcards: placement.job_gpus(loads(wildcards)),
        slurm_partition=lambda wildcards: placement.partition(placement.job_gpus(loads(wildcards))),
        gpu_model=lambda wildcards: placement.gpu_model(placement.job_gpus(loads(wildcards))),
        runtime=runtime,
        **({} if scratch_mb is None else {"disk_mb": lambda wildcards: max(scratch_mb(wildcards), 1000),
                                          "slurm_extra": scratch_extra(scratch_mb)}),
    )


def scratch_extra(scratch_mb):
    """`slurm_extra` of a job that asks for `scratch_mb` (wildcards -> MB) of node-local scratch:
    the site's own `slurm_extra` (the profile's or the command line's default-resources, which
    a rule's value would replace) followed by the scratch request (sbatch --tmp)."""
    from snakemake.resources import Resources

    def extra(wildcards, **aux):
        defaults = workflow.resource_settings.default_resources
        if defaults is not None and not isinstance(defaults, Resources):
            defaults = Resources.from_mapping(defaults)
        site = None
        if defaults and "slurm_extra" in defaults:
            site = defaults["slurm_extra"].evaluate(wildcards, **aux).value
        return placement.join_slurm_extra(site, placement.scratch_request(scratch_mb(wildcards)))

    return extra


_RUNTIMES = {}


def planned_runtime(stage, default):
    """The `runtime=` of the jobs the plan counts under `stage`: wildcards -> the job's
    minutes from the plan (`selfknow plan` writes <results>/plan/runtimes.json, the plan's wall
    time with a margin: selfknow.plan.runtime_limits; read from the run's results, else from
    those its config files name, selfknow.placement.runtimes_files), at least `default`, which
    also serves a job no such file lists (no plan made yet, or one of another config:
    docs/slurm.md) and a job of an API model answering at once, whose time its rate limits
    decide, not the plan."""
    import json

    def minutes(wildcards):
        if "limits" not in _RUNTIMES:
            found = [p for p in placement.runtimes_files(R, workflow.configfiles) if os.path.exists(p)]
            _RUNTIMES["limits"] = {}
            if found:
                with open(found[0], encoding="utf-8") as f:
                    _RUNTIMES["limits"] = json.load(f)
        return max(default, _RUNTIMES["limits"].get(placement.runtime_key(stage, dict(wildcards.items())), default))

    return minutes


def judge_runtime(stage, default):
    """`runtime=` of a job of the LLM judge: a batched API judge waits up to its
    `batch_max_wait_s` for a batch (past the 24 h completion window; a rerun resumes the batch
    after that), plus 30 minutes; any other judge as `planned_runtime`."""
    spec = _model_entry(config["judge"]["llm_judge"])
    if spec["backend"] == "openai" and spec["batch"]:
        return int(spec["batch_max_wait_s"] // 60) + 30
    return planned_runtime(stage, default)


def model_weights(*spec_getters):
    """A params entry, `weights=model_weights(...)` with a rule's model_resources getters:
    {model: {checkpoint: content fingerprint}} of the local weights (`path:` of the config
    entry or checkpoint) the job loads, its own checkpoint's where the job has one, so that the
    job reruns when they change on disk (selfknow.models.fingerprint; cached per file under
    results/cache/fingerprints). Hub models are pinned by revision and workflow-built ones are
    inputs: neither is fingerprinted."""
    from selfknow.models.fingerprint import weights_fingerprint

    def fingerprints(wildcards):
        out = {}
        for get in spec_getters:
            spec = get(wildcards)
            entry = _model_entry(spec["name"]) if spec is not None else {"source": None}
            if "source" in entry:
                continue
            ckpts = [c for c in entry.get("checkpoints", []) if "path" in c]
            if "ckpt" in wildcards.keys() and spec["name"] == wildcards.get("model"):
                ckpts = [c for c in ckpts if c["name"] == wildcards.ckpt]
            paths = {c["name"]: c["path"] for c in ckpts}
            if not paths and "path" in entry:
                paths = {"final": entry["path"]}
            if paths:
                out[spec["name"]] = {c: weights_fingerprint(p, f"{R}/cache/fingerprints") for c, p in paths.items()}
        return out

    return fingerprints


def model_files(name):
    """What a job that loads model `name` needs built first (world families, converted GGUF)."""
    built = {"world": [rpath(SP.WORLD_MODELS, family=name)], "smollm2": [rpath(SP.SMOLLM2)]}
    entry = _model_entry(name)
    return built[entry["source"]] if "source" in entry else []


def get_model_files(wildcards):
    return model_files(wildcards.model)


def get_family_config(wildcards):
    return config["world"]["families"][wildcards.family]


def get_dataset_inputs(wildcards):
    """World datasets are built from the generated world; others load from their source."""
    loader = config["datasets"][wildcards.dataset]["loader"]
    return [rpath(SP.WORLD_DATA, name=n) for n in ("qa", "mcq")] if loader.startswith("world_") else []


def get_dataset_spec(wildcards):
    return config["datasets"][wildcards.dataset]


# The Snakemake report (`snakemake --report`): every catalog entry's caption, category,
# subcategory and label (selfknow.catalogs). A caption is its file in
# workflow_report/ followed by the provenance block of the entry's sidecar
# (`selfknow.report.catalog.caption_text`), written for this run into a directory of its own.
# Captions find the sidecar through the output keys used below ("<table>_csv", "<figure>").
_REPORT_DIR = os.path.join(workflow.current_basedir.get_path_or_uri(secret_free=True), "..", "workflow_report")
_CAPTIONS = {}


def caption_file(key):
    """The full caption of the catalog entry `key`, as a file (Snakemake reads captions from files)."""
    if not _CAPTIONS:
        import atexit, shutil, tempfile

        _CAPTIONS["dir"] = tempfile.mkdtemp(prefix="selfknow-captions-")
        atexit.register(shutil.rmtree, _CAPTIONS["dir"], True)
    path = os.path.join(_CAPTIONS["dir"], REPORT_CATALOG[key]["caption"])
    if path not in _CAPTIONS:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(caption_text(REPORT_CATALOG[key], _REPORT_DIR))
        _CAPTIONS[path] = True
    return path


def report_item(key, path):
    """`path` flagged for the report as the catalog entry `key` ("<paper>/<name>")."""
    item = REPORT_CATALOG[key]
    return report(path, caption=caption_file(key), category=item["category"],
                  subcategory=item["subcategory"], labels={"result": item["label"]})


TABLE_EXTS = ("csv", "md", "tex", "html", "json")


def named_table_targets(paper, names):
    """Every file `selfknow.report.tables.write_table` writes for each table, named
    "<table>_<ext>" (csv, md, tex, html and the provenance sidecar json), for
    `output: **named_table_targets(...)`; the HTML page goes into the report when the catalog
    lists the table "<paper>/<table>" (a figure's data table, tables/persistent/figure3.*, is not
    shown: its figure is)."""
    out = {}
    for n in names:
        key = f"{paper}/{n}"
        shown = key in REPORT_CATALOG and REPORT_CATALOG[key]["kind"] == "table"
        for ext in TABLE_EXTS:
            path = rpath(SP.TABLE, paper=paper, name=n, ext=ext)
            out[f"{n}_{ext}"] = report_item(f"{paper}/{n}", path) if ext == "html" and shown else path
    return out


def figure_target(key):
    """The PNG of the catalog figure `key`, flagged for the report (wildcards stay wildcards)."""
    return report_item(key, f"{R}/{REPORT_CATALOG[key]['output']}")


def named_figure_targets(paper, names):
    """Each figure's PNG, named "<figure>" (as its caption expects) and flagged for the report,
    and its provenance sidecar, named "<figure>_sidecar"."""
    out = {}
    for n in names:
        out[n] = figure_target(f"{paper}/{n}")
        out[f"{n}_sidecar"] = f"{R}/{REPORT_CATALOG[f'{paper}/{n}']['output'][:-len('.png')]}.json"
    return out


#: the LADDER catalog's tables and figures this config builds (protocols/ladder/catalog.py)
LADDER_BUILT = LADDER.built(config)


def all_table_files():
    """Every table and figure of every catalog this config builds (selfknow.catalogs.table_files)."""
    return [f"{R}/{f}" for f in table_files(config)]


def world_models():
    return [m for m in MODELS if "source" in _model_entry(m) and _model_entry(m)["source"] == "world"]


def get_world_generations(wildcards):
    ds = config["world"]["qa_dataset"]
    return {f"{m}@{c}": rpath(SP.GENERATIONS, model=m, ckpt=c, dataset=ds)
            for m in world_models() for c in checkpoint_names(config, m)}


JUDGE = config["judge"]
PERSISTENT_MODELS = config["persistent"]["models"] if "persistent" in config else []


def get_audit_generations(wildcards):
    """The last checkpoint of every persistent-protocol model on `judge.audit_dataset` (default:
    its first short-answer dataset)."""
    return [rpath(SP.GENERATIONS, model=m, ckpt=checkpoint_names(config, m)[-1], dataset=JUDGE["audit_dataset"])
            for m in PERSISTENT_MODELS]


def generation_files():
    """The shared stage's generations that tables read (world evolution, judge audit). The
    default target lists them: Snakemake does not rebuild a deleted file while the files built
    from it are newer, so deleting a model's generations would otherwise rerun nothing; listed,
    that model's generation jobs rerun, and then the tables that read them."""
    files = list(get_world_generations(None).values()) if "world" in config else []
    if "llm_judge" in JUDGE:
        files += [f for f in get_audit_generations(None) if f not in files]
    return files


def get_judge_model_files(wildcards):
    return model_files(JUDGE["llm_judge"])


def get_judge_spec(wildcards):
    return model_spec(config, JUDGE["llm_judge"], R)


def lcae_examinees():
    """(model, checkpoint) pairs; each is answered under every strategy (one examinee each)."""
    return [(m, c) for m in config["lcae"]["examinee_models"] for c in checkpoint_names(config, m)]


def lcae_files(stage):
    return [rpath(LP.STAGE, stage=stage, model=m, ckpt=c) for m, c in lcae_examinees()]


def get_card_inputs(wildcards):
    """Each protocol's per-model outputs that this config produces."""
    out = {}
    if "lcae" in config:
        out["lcae_persons"] = rpath(LP.IRT, part="persons")
        out["lcae_stage3"] = rpath(LP.STAGE3)
    if "ladder" in config:
        out["ladder_main"] = rpath(SP.TABLE, paper="ladder", name="main", ext="csv")
    return out


def get_card_persistent(wildcards):
    """Model -> the persistent metric files of its main evaluation on the first training dataset
    (`p_metric_files`, rules/persistent_common.smk, which a config with persistent models includes)."""
    return {m: p_metric_files(m, config["persistent"]["datasets"][0], MAIN) for m in PERSISTENT_MODELS}


def card_last_checkpoints():
    return {m: checkpoint_names(config, m)[-1] for m in MODELS}
