# Judging (SPEC §0.3): exact match is part of each generation record; the LLM judge grades a
# sample of them and the audit table reports how often the two judges agree.

rule llm_judge:
    input:
        generations=get_audit_generations,
        test=f"{R}/items/{AUDIT_DATASET}/test.parquet",
        model=get_judge_model_files,
    output:
        f"{R}/judgments/llm_judge_audit.parquet",
    params:
        spec=get_judge_spec,
        n_items=JUDGE.get("audit_items", 100),
        seed=config["seed"],
        cache=f"{R}/cache",
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/judge/llm_judge.log",
    benchmark:
        f"{R}/benchmarks/judge/llm_judge.tsv"
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/llm_judge.py"


rule judge_audit_table:
    input:
        rules.llm_judge.output[0],
    output:
        **named_table_targets("judge", ["audit"]),
    params:
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/judge/audit_table.log",
    script:
        "../scripts/judge_audit_table.py"
