# LADDER's held-out prediction (paper §F.4, Table 34): profiles from each subject's train half
# predict its test half. From the ReAct trajectories ladder_react produces (ladder.react), the
# recorded ones of ladder.react_dataset, or, in the offline default, the LADDER sessions' answers.
# Included after rules/ladder_common.smk.


localrules:
    ladder_table34,


rule ladder_table34:
    input:
        unpack(get_ladder_table34_inputs),
    output:
        **named_table_targets("ladder", names(LADDER_CATALOG, job="heldout")),
    params:
        job="selfknow.protocols.ladder.rule_jobs:table34_job",
        config=job_config(config, sections=["ladder"]),
        seed=config["seed"],
        react_specs=get_ladder_react_specs,
        dataset=(LAD["react"]["dataset"] if "react" in LAD
                 else LAD["react_dataset"] if "react_dataset" in LAD else LAD["dataset"]),
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/table34.log",
    benchmark:
        f"{R}/benchmarks/ladder/table34.tsv"
    script:
        "../scripts/run_job.py"


if "react" in LAD:

    rule ladder_react:
        input:
            get_model_files,
            items_path=rpath(SP.ITEMS, dataset=LAD["react"]["dataset"], split="test"),
        output:
            test=rpath(LDP.REACT_RECORDS, part="test"),
            zero_shot=rpath(LDP.REACT_RECORDS, part="zero_shot"),
        params:
            job="selfknow.protocols.ladder.rule_jobs:react_job",
            weights=model_weights(get_model_spec),
            spec=get_model_spec,
            setting=get_react_setting,
            per_domain=LAD["react"]["items_per_domain"],
            max_new_tokens=LAD["react"]["max_new_tokens"],
            prior_mode=LAD["prompted_mode"],
            prior_max_new_tokens=LAD["prompted_max_new_tokens"],
            seed=config["seed"],
            cache_dir=f"{R}/cache",
        threads: 1
        conda:
            "../envs/selfknow.yaml"
        log:
            f"{R}/logs/ladder/react/{{model}}/{{react_config}}.log",
        benchmark:
            f"{R}/benchmarks/ladder/react/{{model}}/{{react_config}}.tsv"
        resources:
            **model_resources(get_model_spec, runtime=planned_runtime("ladder_react", 120)),
        script:
            "../scripts/run_job.py"

