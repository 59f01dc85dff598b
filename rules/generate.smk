# Answer generation, the shared stage (SPEC §0.2): greedy answers per (model, checkpoint, dataset).


rule generate_greedy:
    input:
        test=f"{R}/items/{{dataset}}/test.parquet",
        train=f"{R}/items/{{dataset}}/train.parquet",
        model=get_model_files,
    output:
        f"{R}/generations/{{model}}/{{ckpt}}/greedy/{{dataset}}.parquet",
    params:
        spec=get_model_spec,
        n_shots=config.get("persistent", {}).get("n_shots", 5),
        n_items=config.get("generation", {}).get("n_items", 0),
        seed=config["seed"],
        max_new_tokens=config.get("generation", {}).get("max_new_tokens", 16),
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/generate/{{model}}/{{ckpt}}/greedy/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/generate/{{model}}/{{ckpt}}/greedy/{{dataset}}.tsv"
    resources:
        mem_mb=get_model_mem_mb,
        runtime=120,
        gpu=get_model_gpus,
    script:
        "../scripts/generate_greedy.py"
