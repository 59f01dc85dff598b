# Persistent calibration (SPEC §1): constants and input functions (no rules; rules/persistent.smk
# holds the rules). Checkpoints come from the model registry: the first
# `persistent.train_checkpoints` of a model are its non-oracle training checkpoints, the rest
# its evaluation checkpoints.
from selfknow.protocols.persistent.jobs import RELIABILITY_VARIANTS
from selfknow.protocols.persistent.tables import SECOND_DATASET_TABLES, TABLES
from selfknow.protocols.persistent.variants import (
    MAIN,
    TABLE_VARIANTS,
    TRANSFER,
    TRANSFER_VARIANTS,
    plan_variant,
)

PC = config.get("persistent", {})
P_MODELS = list(PC.get("models", []))
P_DATASETS = list(PC.get("datasets", []))
P_TRANSFER = PC.get("transfer_dataset")
P_SEEDS = list(PC.get("seeds", [0]))
P_VAR_SEEDS = list(PC.get("variance_seeds", P_SEEDS))
P_NTRAIN = PC.get("train_checkpoints", 2)
P_PAIRS = PC.get("random_label_pairs", "consecutive")
P_GCM = PC.get("gcm_model")
P_VARIANTS = [v for v in TABLE_VARIANTS] + ["random_label"]


wildcard_constraints:
    variant=_alt(P_VARIANTS),
    evalset=f"{MAIN}|{TRANSFER}",
    seed=r"\d+",


def p_train_ckpts(model):
    return checkpoint_names(config, model)[:P_NTRAIN]


def p_eval_ckpts(model):
    return checkpoint_names(config, model)[P_NTRAIN:]


def p_sc(model, ckpt, dataset, split):
    return f"{R}/persistent/sc/{model}/{ckpt}/{dataset}/{split}.parquet"


def p_conf(model, dataset, variant, seed):
    return f"{R}/persistent/conf/{model}/{dataset}/{variant}/seed{seed}.parquet"


def p_hidden(model, dataset, seed):
    return f"{R}/persistent/hidden/{model}/{dataset}/seed{seed}.npz"


def p_gcm(model, dataset, seed):
    return f"{R}/persistent/gcm/{model}/{dataset}/seed{seed}.parquet"


def p_metrics(model, dataset, evalset):
    return f"{R}/persistent/metrics/{model}/{dataset}/{evalset}.parquet"


def _sc_inputs(model, dataset, train=(), test=(), transfer=()):
    """Named SC inputs "<role>__<ckpt>[__<split>]" (the scripts turn "__" into ":")."""
    out = {f"train__{c}": p_sc(model, c, dataset, "train") for c in train}
    out.update({f"test__{c}": p_sc(model, c, dataset, "test") for c in test})
    for c in transfer:
        for split in ("train", "test"):
            out[f"transfer__{c}__{split}"] = p_sc(model, c, P_TRANSFER, split)
    return out


def _plan(model, variant):
    return plan_variant(variant, p_train_ckpts(model), p_eval_ckpts(model),
                        with_transfer=bool(P_TRANSFER) and variant in TRANSFER_VARIANTS, pair_mode=P_PAIRS)


def get_persistent_sc_items(wildcards):
    return {"questions": f"{R}/items/{wildcards.dataset}/{wildcards.split}.parquet",
            "train": f"{R}/items/{wildcards.dataset}/train.parquet"}


def get_persistent_n_items(wildcards):
    return PC.get("n_train", 5000) if wildcards.split == "train" else PC.get("n_test", 5000)


def get_variant_inputs(wildcards):
    """The SC tables one variant job reads: train answers of its data checkpoints, test
    answers of the checkpoints it scores, and the transfer dataset's for Table 18."""
    plan = _plan(wildcards.model, wildcards.variant)
    return _sc_inputs(wildcards.model, wildcards.dataset, plan.train_data, plan.test_targets(MAIN),
                      plan.test_targets(TRANSFER))


def get_transfer_variant_inputs(wildcards):
    plan = _plan(wildcards.model, "transfer")
    return _sc_inputs(wildcards.model, wildcards.dataset, plan.train_data, plan.test_targets(MAIN))


def get_train_ckpts(wildcards):
    return p_train_ckpts(wildcards.model)


def get_eval_ckpts(wildcards):
    return p_eval_ckpts(wildcards.model)


def get_min_contrast(wildcards):
    """§A.3: 500 questions on the training datasets, 300 on the transfer dataset (BioASQ)."""
    if wildcards.evalset == MAIN:
        return PC.get("min_contrast", 500)
    return PC.get("min_contrast_transfer", 300)


def get_gcm_inputs(wildcards):
    return _sc_inputs(wildcards.model, wildcards.dataset, train=p_train_ckpts(wildcards.model),
                      test=p_eval_ckpts(wildcards.model))


def get_gcm_spec(wildcards):
    return model_spec(config, P_GCM, R)


def get_gcm_model_files(wildcards):
    return model_files(P_GCM)


def get_gcm_gpus(wildcards):
    return _model_entry(P_GCM).get("gpu", 0)


def get_gcm_mem_mb(wildcards):
    return _model_entry(P_GCM).get("mem_mb", 4000)


def get_metrics_inputs(wildcards):
    m, d = wildcards.model, wildcards.dataset
    tr, ev = p_train_ckpts(m), p_eval_ckpts(m)
    if wildcards.evalset == TRANSFER:
        files = _sc_inputs(m, d, transfer=ev)
        files.update({f"variant__{v}__{s}": p_conf(m, d, v, s) for v in TRANSFER_VARIANTS for s in P_SEEDS})
        return files
    files = _sc_inputs(m, d, train=tr, test=ev + tr[-1:])
    files.update({f"variant__{v}__{s}": p_conf(m, d, v, s) for v in TABLE_VARIANTS for s in P_SEEDS})
    if P_GCM:
        files.update({f"gcm__{s}": p_gcm(m, d, s) for s in P_SEEDS})
    return files


def get_reliability_inputs(wildcards):
    """What `persistent_metrics` reads for the main test set, restricted to the methods the
    reliability diagrams show (`RELIABILITY_VARIANTS`, the GCM) and their first seed."""
    m, d = wildcards.model, wildcards.dataset
    tr, ev = p_train_ckpts(m), p_eval_ckpts(m)
    files = _sc_inputs(m, d, train=tr, test=ev + tr[-1:])
    files.update({f"variant__{v}": p_conf(m, d, v, P_SEEDS[0]) for v in RELIABILITY_VARIANTS})
    if P_GCM:
        files["gcm"] = p_gcm(m, d, P_SEEDS[0])
    return files


def persistent_reliability_files():
    """The reliability diagrams of every persistent model on every training dataset."""
    pattern = f"{R}/{REPORT_CATALOG['persistent/reliability']['output']}"
    return [pattern.format(model=m, dataset=d) for m in P_MODELS for d in P_DATASETS]


def persistent_table_inputs(table):
    """Named "<kind>__<model>__<dataset>__<evalset>" metric, replicate and contrast files."""
    evalsets = [TRANSFER] if table in ("table10", "table18") else [MAIN]
    files = {}
    for m in P_MODELS:
        for d in P_DATASETS:
            for e in evalsets:
                base = f"{R}/persistent/metrics/{m}/{d}/{e}"
                files[f"metrics__{m}__{d}__{e}"] = f"{base}.parquet"
                files[f"replicates__{m}__{d}__{e}"] = f"{base}.replicates.npz"
                files[f"contrast__{m}__{d}__{e}"] = f"{R}/persistent/contrast/{m}/{d}/{e}.parquet"
    return files


def persistent_ckpt_order():
    return checkpoint_names(config, P_MODELS[0]) if P_MODELS else []


def persistent_table_names():
    names = [t for t in TABLES if len(P_DATASETS) > 1 or t not in SECOND_DATASET_TABLES]
    if not P_TRANSFER:
        names = [t for t in names if t not in ("table10", "table18")]
    if not P_GCM:
        names = [t for t in names if t != "table17"]
    return names


def persistent_table_files():
    """Every table and figure of the persistent paper that this config can build."""
    if not P_MODELS:
        return []
    files = table_targets("persistent", persistent_table_names() + ["figure3", "table19"])
    files.append(f"{R}/figures/persistent/figure3.png")
    return files + persistent_reliability_files()
