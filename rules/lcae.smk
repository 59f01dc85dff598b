# Latent Confidence Alignment (SPEC §3): Stage 1 answers per examinee, the joint Rasch fit,
# Stage 2 self-assessment of the Standard-prompting examinees, Stage 3, tables.


LC = config["lcae"]


rule lcae_sample:
    input:
        test_items=rpath(SP.ITEMS, dataset=LC["dataset"], split="test"),
    output:
        out=rpath(LP.ITEMS),
    params:
        job="selfknow.protocols.lcae.jobs:sample_job",
        n_items=LC["n_items"],
        seed=config["seed"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/sample.log",
    script:
        "../scripts/run_job.py"


rule lcae_stage1:
    input:
        get_model_files,
        items_path=rules.lcae_sample.output.out,
    output:
        out=rpath(LP.STAGE, stage="stage1"),
    params:
        job="selfknow.protocols.lcae.jobs:stage1_job",
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        strategies=LC["strategies"],
        max_new_tokens=LC["max_new_tokens"],
        cache_dir=f"{R}/cache",
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
        "../scripts/run_job.py"


rule lcae_irt:
    input:
        stage1_paths=lcae_files("stage1"),
    output:
        out_persons=rpath(LP.IRT, part="persons"),
        out_items=rpath(LP.IRT, part="items"),
    params:
        job="selfknow.protocols.lcae.jobs:irt_job",
        method=LC["rasch_method"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/irt.log",
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/run_job.py"


rule lcae_stage2:
    input:
        get_model_files,
        items_path=rules.lcae_sample.output.out,
        stage1_path=rules.lcae_stage1.output.out,
        irt_items_path=rules.lcae_irt.output.out_items,
        # a base LM's calibration map (base_error_p "calibrated") is fitted on train items
        calibration_path=rpath(SP.ITEMS, dataset=LC["dataset"], split="train"),
    output:
        out=rpath(LP.STAGE, stage="stage2"),
    params:
        job="selfknow.protocols.lcae.jobs:stage2_job",
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        conditions=LC["conditions"],
        repeats=LC["repeats"],
        reflection=LC["reflection"],
        temperature=LC["stage2_temperature"],
        max_new_tokens=LC["max_new_tokens"],
        base_slow_below=LC["base_slow_below"],
        base_error_p=LC["base_error_p"],
        calibration_items=LC["calibration_items"],
        seed=config["seed"],
        cache_dir=f"{R}/cache",
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
        "../scripts/run_job.py"


rule lcae_stage3:
    input:
        stage2_paths=lcae_files("stage2"),
        persons_path=rules.lcae_irt.output.out_persons,
        irt_items_path=rules.lcae_irt.output.out_items,
    output:
        out=rpath(LP.STAGE3),
    params:
        job="selfknow.protocols.lcae.jobs:stage3_job",
        eps=LC["lcae_eps"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/stage3.log",
    script:
        "../scripts/run_job.py"


rule lcae_tables:
    input:
        stage3_path=rules.lcae_stage3.output.out,
        persons_path=rules.lcae_irt.output.out_persons,
        items_path=rules.lcae_irt.output.out_items,
    output:
        **named_table_targets("lcae", names(LCAE_CATALOG, figure=False)),
        **named_figure_targets("lcae", names(LCAE_CATALOG, figure=True)),
    params:
        job="selfknow.protocols.lcae.rule_jobs:tables_job",
        config=job_config(config, sections=["lcae"]),
        prices=LC["prices"],
        method=LC["rasch_method"],
        eps=LC["lcae_eps"],
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/lcae/tables.log",
    script:
        "../scripts/run_job.py"

