# LADDER (SPEC §2): per answering model, the sessions, the prompted levels and the scores;
# then every table and figure. Input functions and constants: rules/ladder_common.smk.


rule ladder_sessions:
    input:
        pool=f"{R}/items/{LAD.get('dataset', 'NONE')}/test.parquet",
        model=get_ladder_session_files,
    output:
        main=f"{R}/ladder/sessions/{{model}}/main.parquet",
        alt=f"{R}/ladder/sessions/{{model}}/alt_user.parquet",
    params:
        spec=get_model_spec,
        user_spec=get_ladder_user_spec,
        user=LAD.get("user", "rule"),
        n_sessions=LAD.get("n_sessions", 50),
        n_turns=LAD.get("n_turns", 50),
        alt_sessions=LAD.get("llm_user_sessions", 0),
        items_per_domain=LAD.get("items_per_domain", 25),
        seed=config["seed"],
        parts=f"{R}/ladder/sessions/{{model}}/parts",
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/sessions/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/sessions/{{model}}.tsv"
    resources:
        mem_mb=get_model_mem_mb,
        runtime=120,
        gpu=get_model_gpus,
    script:
        "../scripts/ladder_sessions.py"


rule ladder_prompted:
    input:
        turns=rules.ladder_sessions.output.main,
        model=get_ladder_prompted_files,
    output:
        profiles=f"{R}/ladder/prompted/{{model}}/profiles.parquet",
        query=f"{R}/ladder/prompted/{{model}}/query.parquet",
    params:
        spec=get_ladder_prompted_spec,
        mode=LAD.get("prompted_mode", "json"),
        max_new_tokens=LAD.get("prompted_max_new_tokens", 200),
        lsa_query_sessions=LAD.get("lsa_query_sessions", LAD.get("n_sessions", 50)),
        prompted_sessions=LAD.get("prompted_sessions", 0),
        lsa_controls=LAD.get("lsa_controls", True),
        seed=config["seed"],
        cache=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/prompted/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/prompted/{{model}}.tsv"
    resources:
        mem_mb=get_model_mem_mb,
        runtime=120,
        gpu=get_model_gpus,
    script:
        "../scripts/ladder_prompted.py"


rule ladder_score:
    input:
        turns=rules.ladder_sessions.output.main,
        alt=rules.ladder_sessions.output.alt,
        profiles=rules.ladder_prompted.output.profiles,
        query=rules.ladder_prompted.output.query,
    output:
        **ladder_score_outputs(),
    params:
        seed=config["seed"],
        latent_query=LAD.get("latent_query", True),
        session_bootstrap=LAD.get("session_bootstrap", 2000),
        cluster_bootstrap=LAD.get("cluster_bootstrap", 400),
        cluster_estimators=LAD.get("cluster_estimators", ["Count", "Bayes-Domain", "Dawid-Skene", "GLAD", "EM-Joint"]),
        flips=LAD.get("noise_flips", [0.0, 0.1, 0.2, 0.3]),
        coverages=LAD.get("noise_coverages", [1.0, 0.5, 0.25, 0.125]),
        noise_repeats=LAD.get("noise_repeats", 1),
        grid_sessions=LAD.get("grid_sessions", 0),
        grid_estimators=LAD.get("grid_estimators", ["Global", "Count", "Bayes-Domain", "Dawid-Skene", "GLAD", "EM-Joint"]),
        random_partitions=LAD.get("random_partitions", 5),
        partition=LAD.get("partition"),
        prefix_step=LAD.get("prefix_step", 10),
        prefix_estimators=LAD.get("prefix_estimators", ["Global", "Count", "Bayes-Domain", "Dawid-Skene", "GLAD", "EM-Joint"]),
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/score/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/score/{{model}}.tsv"
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/ladder_score.py"


rule ladder_tables:
    input:
        unpack(get_ladder_score_parts),
    output:
        **named_table_targets("ladder", LADDER_TABLES),
        **ladder_figure_targets(),
    params:
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/tables.log",
    script:
        "../scripts/ladder_tables.py"


# The importer of released sessions: in the DAG only when the config names a directory.
if config.get("ladder_import_dir"):

    rule ladder_import:
        output:
            **named_table_targets("ladder", ["import_aggregates"]),
        params:
            import_dir=config["ladder_import_dir"],
            estimators=LAD.get("import_estimators", []),
            report=REPORT_SETTINGS,
        conda:
            "../envs/selfknow.yaml"
        log:
            f"{R}/logs/ladder/import.log",
        benchmark:
            f"{R}/benchmarks/ladder/import.tsv"
        resources:
            mem_mb=4000,
            runtime=60,
        script:
            "../scripts/ladder_import.py"
