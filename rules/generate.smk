# Answer generation, the shared stage (SPEC §0.2): greedy answers per (model, checkpoint, dataset).


rule generate_greedy:
    input:
        get_model_files,
        test=rpath(SP.ITEMS, split="test"),
        train=rpath(SP.ITEMS, split="train"),
    output:
        out=rpath(SP.GENERATIONS),
    params:
        job="selfknow.stages.jobs:greedy_job",
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        n_shots=config["generation"]["n_shots"],
        n_items=config["generation"]["n_items"],
        seed=config["seed"],
        max_new_tokens=config["generation"]["max_new_tokens"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/generate/{{model}}/{{ckpt}}/greedy/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/generate/{{model}}/{{ckpt}}/greedy/{{dataset}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("generate", 480)),
    script:
        "../scripts/run_job.py"
