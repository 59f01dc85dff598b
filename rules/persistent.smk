# Persistent calibration (SPEC §1): beams and self-consistency per (model, checkpoint, dataset,
# split); one job per (model, dataset, training variant, seed) that trains its LoRA adapters and
# scores every checkpoint it needs; the GCM; metrics with the paired bootstrap; the tables.
# Input functions and constants: rules/persistent_common.smk.


localrules:
    persistent_figure3,
    persistent_table19,


rule persistent_sc:
    input:
        unpack(get_persistent_sc_items),
        model=get_model_files,
    output:
        sc=f"{R}/persistent/sc/{{model}}/{{ckpt}}/{{dataset}}/{{split}}.parquet",
        beams=f"{R}/persistent/beams/{{model}}/{{ckpt}}/{{dataset}}/{{split}}.parquet",
    params:
        spec=get_model_spec,
        n_items=get_persistent_n_items,
        n_shots=PC.get("n_shots", 5),
        seed=config["seed"],
        num_beams=PC.get("num_beams", 10),
        max_new_tokens=PC.get("max_new_tokens", 24),
        equivalence=PC.get("equivalence", "normalised"),
        prompt_label=PC.get("prompt_label", "Question"),
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/sc/{{model}}/{{ckpt}}/{{dataset}}/{{split}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/sc/{{model}}/{{ckpt}}/{{dataset}}/{{split}}.tsv"
    resources:
        mem_mb=get_model_mem_mb,
        runtime=240,
        gpu=get_model_gpus,
    script:
        "../scripts/persistent_sc.py"


rule persistent_variant:
    input:
        unpack(get_variant_inputs),
        model=get_model_files,
    output:
        conf=f"{R}/persistent/conf/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}.parquet",
        adapters=directory(f"{R}/persistent/adapters/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}"),
    params:
        spec=get_model_spec,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        pair_mode=P_PAIRS,
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}.tsv"
    resources:
        mem_mb=get_model_mem_mb,
        runtime=480,
        gpu=get_model_gpus,
    script:
        "../scripts/persistent_variant.py"


# The respective-checkpoint adapters of Figure 3 and Table 19: with the first variance seed
# they score every checkpoint's answers (the transfer matrix) and save hidden states; with the
# other variance seeds only the hidden states are needed, so persistent_variance_adapters
# trains the adapters and scores nothing.
use rule persistent_variant as persistent_transfer_variant with:
    input:
        unpack(get_transfer_variant_inputs),
        model=get_model_files,
    output:
        conf=f"{R}/persistent/conf/{{model}}/{{dataset}}/transfer/seed{{seed}}.parquet",
        adapters=directory(f"{R}/persistent/adapters/{{model}}/{{dataset}}/transfer/seed{{seed}}"),
        hidden=f"{R}/persistent/hidden/{{model}}/{{dataset}}/seed{{seed}}.npz",
    wildcard_constraints:
        seed=str(P_VAR_SEEDS[0]),
    params:
        spec=get_model_spec,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        pair_mode=P_PAIRS,
        variance_items=PC.get("variance_items", 200),
        cache=f"{R}/cache",
    log:
        f"{R}/logs/persistent/variant/{{model}}/{{dataset}}/transfer/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/variant/{{model}}/{{dataset}}/transfer/seed{{seed}}.tsv"


use rule persistent_transfer_variant as persistent_variance_adapters with:
    output:
        adapters=directory(f"{R}/persistent/adapters/{{model}}/{{dataset}}/transfer/seed{{seed}}"),
        hidden=f"{R}/persistent/hidden/{{model}}/{{dataset}}/seed{{seed}}.npz",
    wildcard_constraints:
        seed=_alt([str(s) for s in P_VAR_SEEDS[1:]]),


rule persistent_gcm:
    input:
        unpack(get_gcm_inputs),
        model=get_gcm_model_files,
    output:
        conf=f"{R}/persistent/gcm/{{model}}/{{dataset}}/seed{{seed}}.parquet",
        adapter=directory(f"{R}/persistent/adapters/{{model}}/{{dataset}}/gcm/seed{{seed}}"),
    params:
        gcm_spec=get_gcm_spec,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/gcm/{{model}}/{{dataset}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/gcm/{{model}}/{{dataset}}/seed{{seed}}.tsv"
    resources:
        mem_mb=get_gcm_mem_mb,
        runtime=240,
        gpu=get_gcm_gpus,
    script:
        "../scripts/persistent_gcm.py"


rule persistent_metrics:
    input:
        unpack(get_metrics_inputs),
    output:
        metrics=f"{R}/persistent/metrics/{{model}}/{{dataset}}/{{evalset}}.parquet",
        replicates=f"{R}/persistent/metrics/{{model}}/{{dataset}}/{{evalset}}.replicates.npz",
        contrast=f"{R}/persistent/contrast/{{model}}/{{dataset}}/{{evalset}}.parquet",
    params:
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        min_contrast=get_min_contrast,
        n_boot=PC.get("bootstrap_replicates", 10000),
        n_boot_ece=PC.get("bootstrap_ece_replicates", PC.get("bootstrap_replicates", 10000)),
        seed=config["seed"],
        equivalence=PC.get("equivalence", "normalised"),
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/metrics/{{model}}/{{dataset}}/{{evalset}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/metrics/{{model}}/{{dataset}}/{{evalset}}.tsv"
    resources:
        mem_mb=8000,
        runtime=240,
    script:
        "../scripts/persistent_metrics.py"


# One rule per table (persistent_table1, ...), so that each table's page in the report has its
# own caption, label and place (workflow_report/catalog.yaml).
for _table in persistent_table_names():

    rule:
        name:
            f"persistent_{_table}"
        input:
            **persistent_table_inputs(_table),
        output:
            **named_table_targets("persistent", [_table]),
        localrule: True
        params:
            table=_table,
            models=P_MODELS,
            datasets=P_DATASETS,
            transfer=P_TRANSFER or "",
            min_contrast=PC.get("min_contrast", 500),
            min_contrast_transfer=PC.get("min_contrast_transfer", 300),
            report=REPORT_SETTINGS,
        conda:
            "../envs/selfknow.yaml"
        log:
            f"{R}/logs/persistent/tables/{_table}.log",
        script:
            "../scripts/persistent_table.py"


rule persistent_figure3:
    input:
        transfer=p_conf(P_MODELS[0], P_DATASETS[0], "transfer", P_VAR_SEEDS[0]) if P_MODELS else [],
        random_label=p_conf(P_MODELS[0], P_DATASETS[0], "random_label", P_SEEDS[0]) if P_MODELS else [],
    output:
        **named_figure_targets("persistent", ["figure3"]),
        **named_table_targets("persistent", ["figure3"]),
    params:
        order=persistent_ckpt_order(),
        report=REPORT_SETTINGS,
        title=f"Figure 3: transfer between checkpoints ({P_MODELS[0] if P_MODELS else ''}, "
              f"{P_DATASETS[0] if P_DATASETS else ''})",
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/figure3.log",
    script:
        "../scripts/persistent_figure3.py"


# Reliability diagrams (beyond the paper; workflow_report/persistent/reliability.rst): one
# figure per (model, training dataset), a panel per confidence method of the main tables, from
# the confidences persistent_metrics assembles (first seed). Not a local rule: with an NLI
# `equivalence` the surrogate method loads the NLI model, as persistent_metrics does.
rule persistent_reliability:
    input:
        unpack(get_reliability_inputs),
    output:
        **named_figure_targets("persistent", ["reliability"]),
    params:
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        train_seed=P_SEEDS[0],
        seed=config["seed"],
        equivalence=PC.get("equivalence", "normalised"),
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/reliability/{{model}}/{{dataset}}.log",
    resources:
        mem_mb=8000,
        runtime=60,
    script:
        "../scripts/persistent_reliability.py"


rule persistent_table19:
    input:
        [p_hidden(P_MODELS[0], P_DATASETS[0], s) for s in P_VAR_SEEDS] if P_MODELS else [],
    output:
        **named_table_targets("persistent", ["table19"]),
    params:
        report=REPORT_SETTINGS,
        title=f"Table 19: Spearman ρ of checkpoint index with adapter hidden-state variance across seeds "
              f"({P_MODELS[0] if P_MODELS else ''}, {P_DATASETS[0] if P_DATASETS else ''})",
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/table19.log",
    script:
        "../scripts/persistent_table19.py"
