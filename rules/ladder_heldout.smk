# LADDER's held-out prediction (paper §F.4, Table 34): profiles from each subject's train half
# predict its test half. From the recorded ReAct trajectories of ladder.react_dataset, or, in
# the offline default, from the LADDER sessions' answers (no model call either way).
# Included after rules/ladder_common.smk.


localrules:
    ladder_table34,


rule ladder_table34:
    input:
        unpack(get_ladder_table34_inputs),
    output:
        **named_table_targets("ladder", ["table34"]),
    params:
        seed=config["seed"],
        react_spec=get_ladder_react_spec,
        dataset=LAD["react_dataset"] if "react_dataset" in LAD else LAD["dataset"],
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/table34.log",
    benchmark:
        f"{R}/benchmarks/ladder/table34.tsv"
    script:
        "../scripts/ladder_table34.py"
