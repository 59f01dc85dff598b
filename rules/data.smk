# Item sampling (SPEC §0.1): every configured dataset normalised to one item schema,
# deduplicated and split into train/test parquet files.


rule items:
    input:
        get_dataset_inputs,
    output:
        train=f"{R}/items/{{dataset}}/train.parquet",
        test=f"{R}/items/{{dataset}}/test.parquet",
    params:
        spec=get_dataset_spec,
        seed=config["seed"],
    # A second of work that whole protocols wait on: Snakemake's greedy scheduler otherwise
    # prefers ready jobs with larger inputs (model weights) and, on the 2-core default, left
    # the extension items and then the 63 s ladder_extension job to run alone at the end.
    priority: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/items/{{dataset}}.log",
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../scripts/items.py"
