# LADDER's cross-task priors (paper §E.1, Tables 14 and 15): per suite (MMLU-Pro categories,
# BBH tasks) and answering model, its answers and its zero-shot prior; then one table per suite.
# Input functions and constants: rules/ladder_crosstask_common.smk.

localrules:
    ladder_crosstask_tables,


rule ladder_crosstask:
    input:
        get_crosstask_model_files,
        get_crosstask_l1,
        item_paths=get_crosstask_items,
    output:
        out_answers=rpath(LDP.CROSSTASK, part="answers"),
        out_prior=rpath(LDP.CROSSTASK, part="prior"),
    wildcard_constraints:
        suite="|".join(CT_SUITES),
    params:
        job="selfknow.protocols.ladder.crosstask:crosstask_job",
        weights=model_weights(get_model_spec, get_crosstask_prompt_spec),
        spec=get_model_spec,
        prompt_spec=get_crosstask_prompt_spec,
        loader=get_crosstask_loader,
        domains=lambda wildcards: get_crosstask_suite(wildcards)["domains"],
        l1_profiles=lambda wildcards: get_crosstask_l1(wildcards)[0] if get_crosstask_l1(wildcards) else None,

        items_per_domain=CT["items_per_domain"],
        max_new_tokens=CT["max_new_tokens"],
        bbh_lenient=CT["bbh_lenient"],
        prior_mode=LAD["prompted_mode"],
        prior_max_new_tokens=LAD["prompted_max_new_tokens"],
        seed=config["seed"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/crosstask/{{suite}}/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/crosstask/{{suite}}/{{model}}.tsv"
    resources:
        **model_resources(get_model_spec, get_crosstask_prompt_spec, runtime=planned_runtime("ladder_crosstask", 120)),
    script:
        "../scripts/run_job.py"


rule ladder_crosstask_tables:
    input:
        unpack(get_crosstask_outputs),
    output:
        **named_table_targets("ladder", CT_TABLES),
    params:
        job="selfknow.protocols.ladder.rule_jobs:crosstask_tables_job",
        config=job_config(config, sections=["ladder"]),
        suites={s: dict(CT["suites"][s]) for s in CT_SUITES},
        loaders={s: crosstask_loader(s) for s in CT_SUITES},
        unparsed=CT["unparsed"],
        prior=CT["prior"],
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/crosstask_tables.log",
    script:
        "../scripts/run_job.py"

