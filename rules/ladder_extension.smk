# LADDER's extension tasks (§F.1-F.2, Table 32): per answering model, GSM8K, HumanEval and BFCL
# in the single-shot two-step protocol (answer, then confidence), then the table over models.
# Input functions and constants: rules/ladder_extension_common.smk.


rule ladder_extension:
    input:
        get_model_files,
        unpack(get_extension_items),
    output:
        out=rpath(LDP.EXTENSION),
    params:
        job="selfknow.protocols.ladder.extension:extension_job",
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        datasets=extension_task_setting("dataset"),
        n_items=extension_task_setting("n_items"),
        max_new_tokens=extension_task_setting("max_new_tokens"),
        confidence_max_new_tokens=EXT["confidence_max_new_tokens"],
        sandbox=EXT["sandbox"],
        unfence_humaneval=EXT["unfence_humaneval"],
        seed=config["seed"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/extension/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/extension/{{model}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("ladder_extension", 120)),
    script:
        "../scripts/run_job.py"


rule ladder_table32:
    input:
        record_paths=extension_record_files(),
    output:
        **named_table_targets("ladder", names(LADDER_CATALOG, job="extension")),
    localrule: True
    params:
        job="selfknow.protocols.ladder.rule_jobs:table32_job",
        config=job_config(config, sections=["ladder"]),
        datasets=extension_task_setting("dataset"),
        loaders=extension_loaders(),
        sign_tolerance_pp=EXT["sign_tolerance_pp"],
        unfence_humaneval=EXT["unfence_humaneval"],
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/table32.log",
    script:
        "../scripts/run_job.py"

