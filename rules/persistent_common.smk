# Persistent calibration (SPEC §1): constants and input functions (no rules; rules/persistent.smk
# holds the rules). Checkpoints come from the model registry: the first
# `persistent.train_checkpoints` of a model are its non-oracle training checkpoints, the rest
# its evaluation checkpoints.
from selfknow.protocols.persistent.inputs import (
    EvalFiles,
    Evaluation,
    MetricFiles,
    ScInput,
    ScTable,
)
from selfknow.protocols.persistent import paths as PP
from selfknow.protocols.persistent.catalog import (
    CATALOG as P_CATALOG,
    TABLE as P_TABLE,
    ContrastTable,
    FindingsTable,
    MethodTable,
    TransferFigure,
    reliability_variants,
    table_evalset,
)
from selfknow.protocols.persistent.variants import (
    MAIN,
    TABLE_VARIANTS,
    TRANSFER,
    TRANSFER_VARIANTS,
    plan_variant,
    transfer_slices,
)

PC = config["persistent"]
P_MODELS = list(PC["models"])
P_DATASETS = list(PC["datasets"])
P_TRANSFER = PC["transfer_dataset"] if "transfer_dataset" in PC else None
P_SEEDS = list(PC["seeds"])
P_VAR_SEEDS = list(PC["variance_seeds"])
P_NTRAIN = PC["train_checkpoints"]
P_PAIRS = PC["random_label_pairs"]
P_GCM = PC["gcm_model"] if "gcm_model" in PC else None
P_VARIANTS = [v for v in TABLE_VARIANTS] + ["random_label"]
P_SPLITS = ("train", "test")
#: where persistent_sc writes its SC tables: labelled ("sc", exact match) or unlabelled for
#: persistent_judge ("candidates", the LLM judge)
P_SC_STAGE = "candidates" if config["judge"]["correctness"] == "llm" else "sc"
#: the catalog's tables and figures this config builds (protocols/persistent/catalog.py)
P_BUILT = P_CATALOG.built(config)


wildcard_constraints:
    variant=_alt(P_VARIANTS),
    evalset=f"{MAIN}|{TRANSFER}",
    seed=r"\d+",


def p_train_ckpts(model):
    return checkpoint_names(config, model)[:P_NTRAIN]


def p_eval_ckpts(model):
    return checkpoint_names(config, model)[P_NTRAIN:]


def p_transfer_slices():
    """Where the transfer variant runs anyway (Figures 3 and 4: the first model, the first
    variance seed), the variants whose confidence tables are cut from its table: each
    wildcard's values."""
    m = P_MODELS[:1]
    return {"model": m, "dataset": [d for _, d in persistent_transfer_figures()], "seed": [str(P_VAR_SEEDS[0])],
            "variant": list(transfer_slices(p_train_ckpts(m[0]), p_eval_ckpts(m[0]))) if m else []}


def p_seed_group_variants():
    """The variants whose seeds `persistent_variant_seeds` trains in one job: not the random-label
    one (it takes one seed) nor those cut from the transfer variant's table for its first
    variance seed (`persistent_variant_slice`), when that seed is one of theirs."""
    sliced = p_transfer_slices()
    cut = set(sliced["variant"]) if sliced["dataset"] and int(sliced["seed"][0]) in P_SEEDS else set()
    return [v for v in TABLE_VARIANTS if v not in cut]


def seeds_runtime(stage, default):
    """`planned_runtime` of a job that runs every seed of `P_SEEDS`: the seeds' minutes summed."""
    per_seed = planned_runtime(stage, default)
    return lambda wildcards: sum(per_seed({**dict(wildcards.items()), "seed": str(s)}) for s in P_SEEDS)


def p_sc(model, ckpt, dataset, split):
    return rpath(PP.SC, stage="sc", model=model, ckpt=ckpt, dataset=dataset, split=split)


def p_conf(model, dataset, variant, seed):
    return rpath(PP.CONF, model=model, dataset=dataset, variant=variant, seed=seed)


def p_hidden(model, dataset, seed):
    return rpath(PP.HIDDEN, model=model, dataset=dataset, seed=seed)


def p_gcm(model, dataset, seed):
    """The GCM's confidences: the released adapter's (one file), else our trained one's seed."""
    if "gcm_adapter" in PC:
        return rpath(PP.GCM_RELEASED, model=model, dataset=dataset)
    return rpath(PP.GCM, model=model, dataset=dataset, seed=seed)


def p_metric_files(model, dataset, evalset):
    where = {"model": model, "dataset": dataset, "evalset": evalset}
    return MetricFiles(rpath(PP.METRICS, **where), rpath(PP.REPLICATES, **where))


def _sc_inputs(model, dataset, train=(), test=(), transfer=()):
    """The SC tables one job of (model, training dataset) reads: the train and test answers of
    the checkpoints `train` and `test`, both splits of the transfer dataset for `transfer`."""
    out = {ScInput(MAIN, "train", c): p_sc(model, c, dataset, "train") for c in train}
    out.update({ScInput(MAIN, "test", c): p_sc(model, c, dataset, "test") for c in test})
    for c in transfer:
        for split in ("train", "test"):
            out[ScInput(TRANSFER, split, c)] = p_sc(model, c, P_TRANSFER, split)
    return out


def _main_sc_inputs(model, dataset):
    """What `persistent_metrics` reads for the main test set: the test answers of the evaluation
    checkpoints and of the last training checkpoint (the surrogate), the train answers of the
    training checkpoints (post-hoc calibration)."""
    tr, ev = p_train_ckpts(model), p_eval_ckpts(model)
    return _sc_inputs(model, dataset, train=tr, test=ev + tr[-1:])


def _plan(model, variant):
    return plan_variant(variant, p_train_ckpts(model), p_eval_ckpts(model),
                        with_transfer=bool(P_TRANSFER) and variant in TRANSFER_VARIANTS, pair_mode=P_PAIRS)


def _variant_views(wildcards):
    """(views of the widest adapter of a variant job, bytes of one view, whether they wait in
    host memory: `views.views_in_host`)."""
    from selfknow.models.registry import DTYPE_BYTES, model_params
    from selfknow.protocols.persistent.views import views_in_host

    spec = get_model_spec(wildcards)
    # persistent_transfer_variant and persistent_variance_adapters fix the variant to "transfer"
    variant = wildcards.variant if hasattr(wildcards, "variant") else "transfer"
    views = max(len(a.views) for a in _plan(wildcards.model, variant).adapters)
    view_bytes = (model_params(spec) or 0) * DTYPE_BYTES[spec["dtype"]]
    return views, view_bytes, views_in_host(spec["device"], views, view_bytes)


def get_variant_bases(wildcards):
    """Copies of the base weights a variant job keeps in host memory: one, except when its
    multi-checkpoint training parks every view of its widest adapter there (a GPU job whose
    views fit, `views.views_in_host`; otherwise they wait in scratch files)."""
    views, _, in_host = _variant_views(wildcards)
    return views if views > 1 and in_host else 1


def get_variant_scratch_mb(wildcards):
    """Node-local scratch (MB) of a variant job whose views wait in files (`views.FileViews`,
    in $TMPDIR): every view of its widest adapter, plus a tenth; 0 when they wait in memory."""
    views, view_bytes, in_host = _variant_views(wildcards)
    return int(views * view_bytes * 1.1 / 2**20) if views > 1 and not in_host else 0


def get_persistent_sc_items(wildcards):
    """Each split's questions (the train split's also give the in-context examples)."""
    return {s: rpath(SP.ITEMS, dataset=wildcards.dataset, split=s) for s in P_SPLITS}


def get_persistent_icl_by_domain(wildcards):
    """Whether each question is shown its own type's in-context examples (BioASQ)."""
    from selfknow.stages.items import icl_by_domain  # imported by the jobs that need it: a heavy module

    return icl_by_domain(config["datasets"][wildcards.dataset])


def get_persistent_judge(wildcards):
    """The LLM judge's spec and settings for a dataset's candidate answers (`judge.labels`,
    `judge.multi_reference_datasets`)."""
    j = config["judge"]
    return {"spec": model_spec(config, j["llm_judge"], R), "labels": j["labels"],
            "multi_reference": wildcards.dataset in j["multi_reference_datasets"]}


def get_persistent_judge_spec(wildcards):
    """The LLM judge's spec (persistent_judge loads it)."""
    return get_persistent_judge(wildcards)["spec"]


def get_persistent_judge_files(wildcards):
    return model_files(config["judge"]["llm_judge"])


def persistent_judge_batches():
    """1 for an API judge with `batch: true` (one Batch API job in flight), else 0."""
    spec = _model_entry(config["judge"]["llm_judge"])
    return int(spec["backend"] == "openai" and spec["batch"])


def get_variant_sc(wildcards):
    """The SC tables one variant job reads: train answers of its data checkpoints, test
    answers of the checkpoints it scores, and the transfer dataset's for Table 18."""
    plan = _plan(wildcards.model, wildcards.variant)
    return _sc_inputs(wildcards.model, wildcards.dataset, plan.train_data, plan.test_targets(MAIN),
                      plan.test_targets(TRANSFER))


def get_transfer_variant_sc(wildcards):
    plan = _plan(wildcards.model, "transfer")
    return _sc_inputs(wildcards.model, wildcards.dataset, plan.train_data, plan.test_targets(MAIN))


def get_train_ckpts(wildcards):
    return p_train_ckpts(wildcards.model)


def get_eval_ckpts(wildcards):
    return p_eval_ckpts(wildcards.model)


def get_min_contrast(wildcards):
    """§A.3: 500 questions on the training datasets, 300 on the transfer dataset (BioASQ)."""
    if wildcards.evalset == MAIN:
        return PC["min_contrast"]
    return PC["min_contrast_transfer"]


def get_gcm_sc(wildcards):
    return _sc_inputs(wildcards.model, wildcards.dataset, train=p_train_ckpts(wildcards.model),
                      test=p_eval_ckpts(wildcards.model))


def get_gcm_spec(wildcards):
    return model_spec(config, P_GCM, R)


def get_gcm_model_files(wildcards):
    return model_files(P_GCM)


def get_metrics_sc(wildcards):
    """The SC tables `persistent_metrics` reads (and whose labels `persistent_judge_counts`
    counts for the table notes)."""
    m, d = wildcards.model, wildcards.dataset
    if wildcards.evalset == TRANSFER:
        return _sc_inputs(m, d, transfer=p_eval_ckpts(m))
    return _main_sc_inputs(m, d)


def get_metrics_confs(wildcards):
    """The variants' confidence tables, every seed."""
    variants = TRANSFER_VARIANTS if wildcards.evalset == TRANSFER else TABLE_VARIANTS
    return [p_conf(wildcards.model, wildcards.dataset, v, s) for v in variants for s in P_SEEDS]


def get_metrics_gcm(wildcards):
    if wildcards.evalset == TRANSFER or not P_GCM:
        return []
    return list(dict.fromkeys(p_gcm(wildcards.model, wildcards.dataset, s) for s in P_SEEDS))


def get_reliability_config(wildcards):
    """The persistent settings of one model's reliability diagrams: the section with that model
    alone in its `models`, so that adding another model reruns none of them."""
    return job_config(config, sections=["persistent"], narrow={"persistent": {"models": [wildcards.model]}})


def get_reliability_sc(wildcards):
    return _main_sc_inputs(wildcards.model, wildcards.dataset)


def get_reliability_confs(wildcards):
    """The variants of the methods the reliability diagrams show (`catalog.reliability_variants`),
    first seed."""
    return [p_conf(wildcards.model, wildcards.dataset, v, P_SEEDS[0]) for v in reliability_variants()]


def get_reliability_gcm(wildcards):
    return [p_gcm(wildcards.model, wildcards.dataset, P_SEEDS[0])] if P_GCM else []


def persistent_table_inputs(table):
    """The metric, contrast-size and judge-count files of every evaluation a table reads."""
    e = table_evalset(table)
    return {Evaluation(m, d, e): EvalFiles(*p_metric_files(m, d, e),
                                           rpath(PP.CONTRAST, model=m, dataset=d, evalset=e),
                                           rpath(PP.JUDGE_COUNTS, model=m, dataset=d, evalset=e))
            for m in P_MODELS for d in P_DATASETS}


def persistent_findings_transfer(table):
    """The findings table's transfer confidences (Figures 3-4's left panels): training dataset
    -> path, first model; none for any other table."""
    if not isinstance(P_TABLE[table].layout, FindingsTable):
        return {}
    return {P_DATASETS[t.layout.dataset]: p_conf(P_MODELS[0], P_DATASETS[t.layout.dataset], "transfer", P_VAR_SEEDS[0])
            for t in P_BUILT if isinstance(t.layout, TransferFigure)}


def persistent_findings_params(table):
    """The findings table's params beyond the other tables' (so that theirs stay as they were)."""
    if not isinstance(P_TABLE[table].layout, FindingsTable):
        return {}
    return {"transfer_confs": persistent_findings_transfer(table), "order": persistent_ckpt_order(),
            "n_boot": PC["bootstrap_replicates"], "seed": PC["bootstrap_seed"]}


def persistent_ckpt_order():
    return checkpoint_names(config, P_MODELS[0]) if P_MODELS else []


def persistent_table_names():
    """The method and contrast tables this config builds (one rule each, rules/persistent.smk)."""
    return [t.name for t in P_BUILT if isinstance(t.layout, (MethodTable, ContrastTable, FindingsTable))]


def persistent_transfer_figures():
    """(figure, training dataset): Figure 3 on the first training dataset, Figure 4 (§B.6) on the
    second, each for the first model."""
    return [(t.name, P_DATASETS[t.layout.dataset]) for t in P_BUILT if isinstance(t.layout, TransferFigure)]


def persistent_accuracy_datasets():
    """Table 7's columns: the training datasets and the transfer dataset."""
    return P_DATASETS + ([P_TRANSFER] if P_TRANSFER else [])


def persistent_table7_inputs():
    """Every checkpoint's SC tables: the test split of the training datasets, both splits of the
    transfer dataset (which its metrics pool)."""
    return {ScTable(m, c, d, split): p_sc(m, c, d, split) for m in P_MODELS for c in checkpoint_names(config, m)
            for d in persistent_accuracy_datasets() for split in (("train", "test") if d == P_TRANSFER else ("test",))}


def p_gcm_backbone_ckpt():
    """The checkpoint of `gcm_model` the GCM is trained on (`jobs.gcm_job`: its last)."""
    return checkpoint_names(config, P_GCM)[-1] if P_GCM else ""


def persistent_figure2_metrics():
    """The main evaluation's metric files of every (model, training dataset); none without a
    GCM (no Figure 2)."""
    if not P_GCM:
        return {}
    return {Evaluation(m, d, MAIN): p_metric_files(m, d, MAIN) for d in P_DATASETS for m in P_MODELS}


def persistent_figure2_sc():
    """The test SC tables of the GCM backbone and of every model's evaluation checkpoints, on
    every training dataset; none without a GCM."""
    if not P_GCM:
        return {}
    keys = [ScTable(P_GCM, p_gcm_backbone_ckpt(), d, "test") for d in P_DATASETS]
    keys += [ScTable(m, c, d, "test") for d in P_DATASETS for m in P_MODELS for c in p_eval_ckpts(m)]
    return {k: p_sc(*k) for k in keys}
