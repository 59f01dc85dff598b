# The offline mini world: generated knowledge, small LMs trained on it, and the table showing
# that knowledge evolves across checkpoints.

rule world_generate:
    output:
        **{name: rpath(SP.WORLD_DATA, name=name) for name in ("corpus", "facts", "qa", "mcq")},
    params:
        job="selfknow.world.generator:generate_job",
        world={"seed": config["world"]["seed"], **config["world"]["generator"]},
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/world_generate.log",
    benchmark:
        f"{R}/benchmarks/world_generate.tsv"
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/run_job.py"


rule world_train:
    input:
        corpus=rules.world_generate.output.corpus,
    output:
        out=directory(rpath(SP.WORLD_MODELS)),
    params:
        job="selfknow.world.trainer:train_job",
        family=get_family_config,
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/world_train/{{family}}.log",
    benchmark:
        f"{R}/benchmarks/world_train/{{family}}.tsv"
    resources:
        mem_mb=6000,
        runtime=120,
    script:
        "../scripts/run_job.py"


rule world_evolution_table:
    input:
        unpack(get_world_generations),
        curriculum=rules.world_generate.output.qa,
    output:
        **named_table_targets(WORLD_CATALOG.paper, names(WORLD_CATALOG.tables)),
    params:
        job="selfknow.report.jobs:world_evolution_job",
        config=job_config(config, sections=["world"], models=world_models()),
        checkpoints={m: checkpoint_names(config, m) for m in world_models()},
        n_train=config["persistent"]["train_checkpoints"] if "persistent" in config else 0,
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/world/evolution_table.log",
    script:
        "../scripts/run_job.py"

