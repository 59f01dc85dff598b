# Item sampling (SPEC §0.1): every configured dataset normalised to one item schema,
# deduplicated and split into train/test parquet files.


rule items:
    input:
        world=get_dataset_inputs,
    output:
        train=rpath(SP.ITEMS, split="train"),
        test=rpath(SP.ITEMS, split="test"),
    params:
        job="selfknow.stages.items:items_job",
        spec=get_dataset_spec,
        seed=config["seed"],
    # A second of work that whole protocols wait on. Snakemake's greedy scheduler ranks ready
    # jobs by priority, then by input size, so without it these small jobs wait behind the
    # model jobs (whose inputs are the weights), and so does everything downstream of them.
    priority: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/items/{{dataset}}.log",
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../scripts/run_job.py"

