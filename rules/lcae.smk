# Latent Confidence Alignment (SPEC §3): Stage 1 answers per examinee, the joint Rasch fit,
# Stage 2 self-assessment of the Standard-prompting examinees, Stage 3, tables.


LC = config["lcae"]


rule lcae_sample:
    input:
        f"{R}/items/{LC['dataset']}/test.parquet",
    output:
        f"{R}/lcae/items.parquet",
    params:
        n_items=LC["n_items"],
        seed=config["seed"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/sample.log",
    script:
        "../scripts/lcae_sample.py"


rule lcae_stage1:
    input:
        sample=rules.lcae_sample.output[0],
        model=get_model_files,
    output:
        f"{R}/lcae/stage1/{{model}}/{{ckpt}}.parquet",
    params:
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        strategies=LC["strategies"],
        max_new_tokens=LC["max_new_tokens"],
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/stage1/{{model}}/{{ckpt}}.log",
    benchmark:
        f"{R}/benchmarks/lcae/stage1/{{model}}/{{ckpt}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("lcae_stage1", 480)),
    script:
        "../scripts/lcae_stage1.py"


rule lcae_irt:
    input:
        lcae_files("stage1"),
    output:
        persons=f"{R}/lcae/irt/persons.parquet",
        item_params=f"{R}/lcae/irt/items.parquet",
    params:
        method=LC["rasch_method"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/irt.log",
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/lcae_irt.py"


rule lcae_stage2:
    input:
        sample=rules.lcae_sample.output[0],
        stage1=f"{R}/lcae/stage1/{{model}}/{{ckpt}}.parquet",
        irt=rules.lcae_irt.output.item_params,
        model=get_model_files,
    output:
        f"{R}/lcae/stage2/{{model}}/{{ckpt}}.parquet",
    params:
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        conditions=LC["conditions"],
        repeats=LC["repeats"],
        reflection=LC["reflection"],
        temperature=LC["stage2_temperature"],
        max_new_tokens=LC["max_new_tokens"],
        base_slow_below=LC["base_slow_below"],
        base_error_p=LC["base_error_p"],
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/stage2/{{model}}/{{ckpt}}.log",
    benchmark:
        f"{R}/benchmarks/lcae/stage2/{{model}}/{{ckpt}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("lcae_stage2", 480)),
    script:
        "../scripts/lcae_stage2.py"


rule lcae_stage3:
    input:
        stage2=lcae_files("stage2"),
        persons=rules.lcae_irt.output.persons,
        item_params=rules.lcae_irt.output.item_params,
    output:
        f"{R}/lcae/stage3.parquet",
    params:
        eps=LC["lcae_eps"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/stage3.log",
    script:
        "../scripts/lcae_stage3.py"


rule lcae_tables:
    input:
        stage3=rules.lcae_stage3.output[0],
        persons=rules.lcae_irt.output.persons,
        item_params=rules.lcae_irt.output.item_params,
    output:
        **named_table_targets("lcae", names(LCAE_CATALOG, figure=False)),
        **named_figure_targets("lcae", names(LCAE_CATALOG, figure=True)),
    params:
        prices=LC["prices"],
        method=LC["rasch_method"],
        eps=LC["lcae_eps"],
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/tables.log",
    script:
        "../scripts/lcae_tables.py"
