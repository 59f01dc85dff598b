# Persistent calibration (SPEC §1): beams and self-consistency per (model, checkpoint, dataset,
# split); one job per (model, dataset, training variant, seed) that trains its LoRA adapters and
# scores every checkpoint it needs; the GCM; metrics with the paired bootstrap; the tables.
# Input functions and constants: rules/persistent_common.smk.


localrules:
    persistent_table19,
    persistent_variant_slice,


# One job per (model, checkpoint, dataset) serves both splits: one model load (minutes for a
# 32B checkpoint) instead of two, and on the offline default 18 fewer jobs of ~7 s start-up.
# The GCM backbone's train answers come along unused (paper scale: 0.6 of 372 GPU-hours and
# 10,000 of 619,181 judge requests). Exact-match labels are given here (cheap, no extra job);
# under the LLM judge this job writes the unlabelled candidates and persistent_judge labels them.
rule persistent_sc:
    input:
        get_model_files,
        unpack(get_persistent_sc_items),
    output:
        **{f"sc_{s}": rpath(PP.SC, stage=P_SC_STAGE, split=s) for s in P_SPLITS},
        **{f"beams_{s}": rpath(PP.BEAMS, split=s) for s in P_SPLITS},
    params:
        job="selfknow.protocols.persistent.rule_jobs:sc",
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        n_items={"train": PC["n_train"], "test": PC["n_test"]},
        n_shots=PC["n_shots"],
        icl_by_domain=get_persistent_icl_by_domain,
        seed=config["seed"],
        num_beams=PC["num_beams"],
        max_new_tokens=PC["max_new_tokens"],
        equivalence=PC["equivalence"],
        normalisation=PC["answer_normalisation"],
        prompt_label=PC["prompt_label"],
        correctness=JUDGE["correctness"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/sc/{{model}}/{{ckpt}}/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/sc/{{model}}/{{ckpt}}/{{dataset}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("persistent_sc", 240)),
    script:
        "../scripts/run_job.py"


# The LLM judge (persistent §3.1, §A.5) as a stage of its own: a job that loads no model of the
# beam search, so no GPU waits on judge requests (an API judge's Batch API job may take its
# whole 24-hour window). `api_batches` is 1 for a batched API judge: the profile's
# `resources: api_batches` caps how many such jobs (batches) are in flight at once.
if JUDGE["correctness"] == "llm":

    rule persistent_judge:
        input:
            get_persistent_judge_files,
            unpack(get_persistent_sc_items),
            **{f"cand_{s}": rpath(PP.SC, stage="candidates", split=s) for s in P_SPLITS},
        output:
            **{f"sc_{s}": rpath(PP.SC, stage="sc", split=s) for s in P_SPLITS},
        params:
            job="selfknow.protocols.persistent.rule_jobs:judge",
            weights=model_weights(get_persistent_judge_spec),
            judge=get_persistent_judge,
            cache_dir=f"{R}/cache",
        threads: 1
        conda:
            "../envs/selfknow.yaml"
        log:
            f"{R}/logs/persistent/judge/{{model}}/{{ckpt}}/{{dataset}}.log",
        benchmark:
            f"{R}/benchmarks/persistent/judge/{{model}}/{{ckpt}}/{{dataset}}.tsv"
        resources:
            **model_resources(get_persistent_judge_spec, runtime=judge_runtime("persistent_judge", 240)),
            api_batches=persistent_judge_batches(),
        script:
            "../scripts/run_job.py"


rule persistent_variant:
    input:
        get_model_files,
        sc_paths=input_paths(get_variant_sc),
    output:
        out=rpath(PP.CONF),
        adapters_dir=directory(rpath(PP.ADAPTERS)),
    params:
        job="selfknow.protocols.persistent.rule_jobs:variant",
        weights=model_weights(get_model_spec),
        sc_paths=get_variant_sc,
        spec=get_model_spec,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        pair_mode=P_PAIRS,
        hparams=PC["adapter"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("persistent_variants", 480), bases=get_variant_bases,
                           scratch_mb=get_variant_scratch_mb),
    script:
        "../scripts/run_job.py"


# The variants whose every adapter and scoring the transfer variant also has (the single-answer
# respective and single-checkpoint ones; `variants.transfer_slices`): where it runs for Figures
# 3 and 4, their confidence tables are cut from its table instead of trained and scored again.
rule persistent_variant_slice:
    input:
        transfer_conf=rpath(PP.CONF, variant="transfer"),
    output:
        out=rpath(PP.CONF),
    wildcard_constraints:
        **{k: _alt(v) for k, v in p_transfer_slices().items()},
    params:
        job="selfknow.protocols.persistent.jobs:variant_slice_job",
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seed{{seed}}.log",
    script:
        "../scripts/run_job.py"


ruleorder: persistent_variant_slice > persistent_variant


# The respective-checkpoint adapters of Figure 3 and Table 19: with the first variance seed
# they score every checkpoint's answers (the transfer matrix) and save hidden states; with the
# other variance seeds only the hidden states are needed, so persistent_variance_adapters
# trains the adapters and scores nothing.
use rule persistent_variant as persistent_transfer_variant with:
    input:
        get_model_files,
        sc_paths=input_paths(get_transfer_variant_sc),
    output:
        out=rpath(PP.CONF, variant="transfer"),
        adapters_dir=directory(rpath(PP.ADAPTERS, variant="transfer")),
        hidden_out=rpath(PP.HIDDEN),
    wildcard_constraints:
        seed=str(P_VAR_SEEDS[0]),
    params:
        job="selfknow.protocols.persistent.rule_jobs:variant",
        sc_paths=get_transfer_variant_sc,
        spec=get_model_spec,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        pair_mode=P_PAIRS,
        variance_items=PC["variance_items"],
        hparams=PC["adapter"],
        cache_dir=f"{R}/cache",
    log:
        f"{R}/logs/persistent/variant/{{model}}/{{dataset}}/transfer/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/variant/{{model}}/{{dataset}}/transfer/seed{{seed}}.tsv"


use rule persistent_transfer_variant as persistent_variance_adapters with:
    output:
        adapters_dir=directory(rpath(PP.ADAPTERS, variant="transfer")),
        hidden_out=rpath(PP.HIDDEN),
    wildcard_constraints:
        seed=_alt([str(s) for s in P_VAR_SEEDS[1:]]),


# The GCM: the released adapter scored on its backbone (`persistent.gcm_adapter`, the paper's),
# or, without one, our own adapter trained per seed (method gcm_trained; the offline default).
rule persistent_gcm_released:
    input:
        get_gcm_model_files,
        sc_paths=input_paths(get_gcm_sc),
    output:
        out=rpath(PP.GCM_RELEASED),
    params:
        job="selfknow.protocols.persistent.jobs:released_gcm_job",
        weights=model_weights(get_gcm_spec),
        sc_paths=get_gcm_sc,
        gcm_spec=get_gcm_spec,
        adapter=lambda wildcards: PC["gcm_adapter"],  # the rule's jobs exist only with one
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/gcm/{{model}}/{{dataset}}/released.log",
    benchmark:
        f"{R}/benchmarks/persistent/gcm/{{model}}/{{dataset}}/released.tsv"
    resources:
        **model_resources(get_gcm_spec, runtime=planned_runtime("persistent_gcm", 240)),
    script:
        "../scripts/run_job.py"


rule persistent_gcm:
    input:
        get_gcm_model_files,
        sc_paths=input_paths(get_gcm_sc),
    output:
        out=rpath(PP.GCM),
        adapter_dir=directory(rpath(PP.ADAPTERS, variant="gcm")),
    params:
        job="selfknow.protocols.persistent.rule_jobs:gcm",
        weights=model_weights(get_gcm_spec),
        sc_paths=get_gcm_sc,
        gcm_spec=get_gcm_spec,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        hparams=PC["gcm_training"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/gcm/{{model}}/{{dataset}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/persistent/gcm/{{model}}/{{dataset}}/seed{{seed}}.tsv"
    resources:
        **model_resources(get_gcm_spec, runtime=planned_runtime("persistent_gcm", 240)),
    script:
        "../scripts/run_job.py"


# With `persistent.seeds_in_one_job` (the offline default) one job trains every seed of a
# variant, and one every seed of the GCM, one after another, as the authors' trainer takes
# several seeds (conset/train_confidence.py): a process's start-up (4.6-5.0 CPU-s of imports
# here, docs/benchmarks.md) is paid once. The files stay per seed. The random-label variant (one
# seed) and the variants cut from the transfer variant's table for their first seed keep a job
# per seed, as does a cluster run (the paper config), where the seeds' jobs run in parallel.
if PC["seeds_in_one_job"]:

    use rule persistent_variant as persistent_variant_seeds with:
        output:
            out=expand(rpath(PP.CONF), seed=P_SEEDS, allow_missing=True),
            adapters_dir=[directory(p) for p in expand(rpath(PP.ADAPTERS), seed=P_SEEDS, allow_missing=True)],
        wildcard_constraints:
            variant=_alt(p_seed_group_variants()),
        params:
            job="selfknow.protocols.persistent.rule_jobs:variant_seeds",
            seeds=P_SEEDS,
        log:
            f"{R}/logs/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seeds.log",
        benchmark:
            f"{R}/benchmarks/persistent/variant/{{model}}/{{dataset}}/{{variant}}/seeds.tsv"
        resources:
            **model_resources(get_model_spec, runtime=seeds_runtime("persistent_variants", 480),
                              bases=get_variant_bases, scratch_mb=get_variant_scratch_mb),

    use rule persistent_gcm as persistent_gcm_seeds with:
        output:
            out=expand(rpath(PP.GCM), seed=P_SEEDS, allow_missing=True),
            adapter_dir=[directory(p) for p in expand(rpath(PP.ADAPTERS, variant="gcm"), seed=P_SEEDS,
                                                      allow_missing=True)],
        params:
            job="selfknow.protocols.persistent.rule_jobs:gcm_seeds",
            seeds=P_SEEDS,
        log:
            f"{R}/logs/persistent/gcm/{{model}}/{{dataset}}/seeds.log",
        benchmark:
            f"{R}/benchmarks/persistent/gcm/{{model}}/{{dataset}}/seeds.tsv"
        resources:
            **model_resources(get_gcm_spec, runtime=seeds_runtime("persistent_gcm", 240)),

    ruleorder: persistent_variant_seeds > persistent_variant
    ruleorder: persistent_gcm_seeds > persistent_gcm


rule persistent_metrics:
    input:
        sc_paths=input_paths(get_metrics_sc),
        variant_paths=get_metrics_confs,
        gcm_paths=get_metrics_gcm,
    output:
        out_metrics=rpath(PP.METRICS),
        out_replicates=rpath(PP.REPLICATES),
        out_contrast=rpath(PP.CONTRAST),
        out_records=rpath(PP.RECORDS),
    params:
        job="selfknow.protocols.persistent.jobs:metrics_job",
        sc_paths=get_metrics_sc,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        min_contrast=get_min_contrast,
        n_boot=PC["bootstrap_replicates"],
        n_boot_ece=PC["bootstrap_ece_replicates"],
        seed=PC["bootstrap_seed"],
        equivalence=PC["equivalence"],
        normalisation=PC["answer_normalisation"],
        clamp=PC["confidence_clamp"],
        bt_max_iter=PC["bt_max_iter"],
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
        "../scripts/run_job.py"


# Who labelled the candidate answers and how often the judge refused or gave no parsable
# label, counted over the SC tables the metrics read, for the table notes.
rule persistent_judge_counts:
    input:
        sc_paths=input_paths(get_metrics_sc),
    output:
        out=rpath(PP.JUDGE_COUNTS),
    localrule: True
    params:
        job="selfknow.protocols.persistent.jobs:judge_count_job",
        sc_paths=get_metrics_sc,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/judge/{{model}}/{{dataset}}/{{evalset}}.log",
    script:
        "../scripts/run_job.py"


# One rule per table (persistent_table1, ...), so that each table's page in the report has its
# own caption, label and place in the report (its catalog entry).
for _table in persistent_table_names():

    rule:
        name:
            f"persistent_{_table}"
        input:
            files=paths_of(persistent_table_inputs(_table)),
            transfer_confs=list(persistent_findings_transfer(_table).values()),
        output:
            **named_table_targets("persistent", [_table]),
        localrule: True
        params:
            job="selfknow.protocols.persistent.rule_jobs:table",
            config=job_config(config, sections=["persistent"]),
            files=persistent_table_inputs(_table),
            table=_table,
            models=P_MODELS,
            datasets=P_DATASETS,
            transfer=P_TRANSFER or "",
            min_contrast=PC["min_contrast"],
            min_contrast_transfer=PC["min_contrast_transfer"],
            seeds=P_SEEDS,
            report=REPORT_SETTINGS,
            **persistent_findings_params(_table),
        conda:
            "../envs/selfknow.yaml"
        log:
            f"{R}/logs/persistent/tables/{_table}.log",
        script:
            "../scripts/run_job.py"


# Figure 3 (§4.3) on the first training dataset and Figure 4 (§B.6) on the second: the
# respective-checkpoint adapters' transfer matrix and the random-label pairs, first model.
for _figure, _d in persistent_transfer_figures():

    rule:
        name:
            f"persistent_{_figure}"
        input:
            transfer_conf=p_conf(P_MODELS[0], _d, "transfer", P_VAR_SEEDS[0]),
            random_conf=p_conf(P_MODELS[0], _d, "random_label", P_SEEDS[0]),
        output:
            **named_figure_targets("persistent", [_figure]),
            **named_table_targets("persistent", [_figure]),
        localrule: True
        params:
            job="selfknow.protocols.persistent.rule_jobs:transfer_figure",
            config=job_config(config, sections=["persistent"], narrow={"persistent": {"models": P_MODELS[:1]}}),
            figure=_figure,
            model=P_MODELS[0],
            dataset=_d,
            order=persistent_ckpt_order(),
            n_boot=PC["bootstrap_replicates"],
            seed=PC["bootstrap_seed"],
            report=REPORT_SETTINGS,
        conda:
            "../envs/selfknow.yaml"
        log:
            f"{R}/logs/persistent/{_figure}.log",
        script:
            "../scripts/run_job.py"


rule persistent_table7:
    input:
        sc_paths=paths_of(persistent_table7_inputs()),
    output:
        **named_table_targets("persistent", ["table7"]),
    localrule: True
    params:
        job="selfknow.protocols.persistent.rule_jobs:table7",
        config=job_config(config, sections=["persistent"]),
        sc_paths=persistent_table7_inputs(),
        models=P_MODELS,
        checkpoints={m: checkpoint_names(config, m) for m in P_MODELS},
        n_train=P_NTRAIN,
        datasets=persistent_accuracy_datasets(),
        transfer=P_TRANSFER or "",
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/table7.log",
    script:
        "../scripts/run_job.py"


# Figure 2 (§3.2, §B.4): the GCM's contrast-set AUC headroom against oracle training, by the
# error rate of the GCM's backbone (the last checkpoint of `gcm_model`) on the contrast questions.
rule persistent_figure2:
    input:
        metric_paths=paths_of(persistent_figure2_metrics()),
        sc_paths=paths_of(persistent_figure2_sc()),
    output:
        **named_figure_targets("persistent", ["figure2"]),
        **named_table_targets("persistent", ["figure2"]),
    localrule: True
    params:
        job="selfknow.protocols.persistent.rule_jobs:figure2",
        config=job_config(config, sections=["persistent"]),
        metric_paths=persistent_figure2_metrics(),
        sc_paths=persistent_figure2_sc(),
        models=P_MODELS,
        eval_ckpts={m: p_eval_ckpts(m) for m in P_MODELS},
        datasets=P_DATASETS,
        min_contrast=PC["min_contrast"],
        backbone_model=P_GCM or "",
        backbone_ckpt=p_gcm_backbone_ckpt(),
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/figure2.log",
    script:
        "../scripts/run_job.py"


# Reliability diagrams (beyond the paper; workflow_report/persistent/reliability.rst): one
# figure per (model, training dataset), a panel per confidence method of the main tables, from
# the confidences persistent_metrics assembles (first seed). Not a local rule: with an NLI
# `equivalence` the surrogate method loads the NLI model, as persistent_metrics does.
rule persistent_reliability:
    input:
        sc_paths=input_paths(get_reliability_sc),
        variant_paths=get_reliability_confs,
        gcm_paths=get_reliability_gcm,
    output:
        **named_figure_targets("persistent", ["reliability"]),
    params:
        job=P_TABLE["reliability"].builder,
        config=get_reliability_config,
        sc_paths=get_reliability_sc,
        train_ckpts=get_train_ckpts,
        eval_ckpts=get_eval_ckpts,
        seed=config["seed"],
        title=lambda wildcards: P_TABLE["reliability"].title.format(model=wildcards.model, dataset=wildcards.dataset,
                                                                    seed=P_SEEDS[0]),
        equivalence=PC["equivalence"],
        normalisation=PC["answer_normalisation"],
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/reliability/{{model}}/{{dataset}}.log",
    resources:
        mem_mb=8000,
        runtime=60,
    script:
        "../scripts/run_job.py"


rule persistent_table19:
    input:
        hidden_paths=[p_hidden(P_MODELS[0], P_DATASETS[0], s) for s in P_VAR_SEEDS] if P_MODELS else [],
    output:
        **named_table_targets("persistent", ["table19"]),
    params:
        job="selfknow.protocols.persistent.rule_jobs:table19",
        config=job_config(config, sections=["persistent"], narrow={"persistent": {"models": P_MODELS[:1]}}),
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/persistent/table19.log",
    script:
        "../scripts/run_job.py"

