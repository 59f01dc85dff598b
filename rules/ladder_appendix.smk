# LADDER appendix items built from the LADDER jobs' outputs, no model call (protocols/ladder/
# appendix.py): Table 18 (clean-label optimisation of GLAD-style and Dawid-Skene), Table 33
# (the lite protocol), Figures 9 and 11.


localrules:
    ladder_appendix,


rule ladder_optimisation:
    input:
        turns_path=rules.ladder_sessions.output.out_main,
    output:
        out_path=rpath(LDP.SCORES, part="optimisation"),
    params:
        job="selfknow.protocols.ladder.optimisation:optimisation_job",
        seed=config["seed"],
        **LAD["optimisation"],
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/optimisation/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/optimisation/{{model}}.tsv"
    resources:
        mem_mb=2000,
        runtime=30,
    script:
        "../scripts/run_job.py"


rule ladder_appendix:
    input:
        unpack(get_ladder_appendix_inputs),
    output:
        **named_table_targets("ladder", LADDER_APPENDIX_TABLES),
        **named_figure_targets("ladder", LADDER_APPENDIX_FIGURES),
    params:
        job="selfknow.protocols.ladder.rule_jobs:appendix_job",
        config=job_config(config, sections=["ladder"]),
        report=REPORT_SETTINGS,
        lite_budgets=LAD["lite_budgets"],
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/appendix.log",
    benchmark:
        f"{R}/benchmarks/ladder/appendix.tsv"
    script:
        "../scripts/run_job.py"

