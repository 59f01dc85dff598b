# Judging (SPEC §0.3): exact match is part of each generation record; the LLM judge grades a
# sample of them in each audited label mode and the audit table reports how often the two
# judges agree. (The persistent protocol's own labels: rules persistent_sc and persistent_judge,
# `judge.correctness`.)

rule llm_judge:
    input:
        get_judge_model_files,
        generations=get_audit_generations,
        test=rpath(SP.ITEMS, dataset=JUDGE["audit_dataset"], split="test"),
    output:
        out=rpath(SP.JUDGMENTS),
    params:
        job="selfknow.stages.jobs:llm_judge_job",
        weights=model_weights(get_judge_spec),
        spec=get_judge_spec,
        n_items=config["judge"]["audit_items"],
        label_modes=config["judge"]["audit_labels"],
        multi_reference=JUDGE["audit_dataset"] in JUDGE["multi_reference_datasets"],
        seed=config["seed"],
        cache_dir=f"{R}/cache",
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/judge/llm_judge.log",
    benchmark:
        f"{R}/benchmarks/judge/llm_judge.tsv"
    resources:
        **model_resources(get_judge_spec, runtime=judge_runtime("judge_audit", 240)),
    script:
        "../scripts/run_job.py"


# the judge, and the models whose answers it graded (the last checkpoints of the persistent models)
JUDGE_AUDIT_MODELS = list(dict.fromkeys(
    [JUDGE["llm_judge"], *(config["persistent"]["models"] if "persistent" in config else [])]))


rule judge_audit_table:
    input:
        judgments=rules.llm_judge.output.out,
    output:
        **named_table_targets(JUDGE_CATALOG.paper, names(JUDGE_CATALOG.tables)),
    params:
        job="selfknow.report.jobs:judge_audit_job",
        models=JUDGE_AUDIT_MODELS,
        config=job_config(config, sections=["judge"], models=JUDGE_AUDIT_MODELS),
        replicates=config["judge"]["audit_bootstrap"],
        seed=config["seed"],
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/judge/audit_table.log",
    script:
        "../scripts/run_job.py"

