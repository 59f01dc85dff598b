# LADDER (SPEC §2): per answering model, the sessions, the prompted levels and the scores;
# then every table and figure. Input functions and constants: rules/ladder_common.smk.


rule ladder_answers:
    # the answering model alone: a local model's GPU job makes no request to an API user
    input:
        get_model_files,
        items_path=rpath(SP.ITEMS, dataset=LAD["dataset"], split="test"),
    output:
        out=rpath(LDP.ANSWERS),
    params:
        job="selfknow.protocols.ladder.jobs:answers_job",
        weights=model_weights(get_model_spec),
        spec=get_model_spec,
        n_sessions=LAD["n_sessions"],
        alt_sessions=LAD["llm_user_sessions"],
        n_turns=LAD["n_turns"],
        items_per_domain=LAD["items_per_domain"],
        answering=LADDER_ANSWERING,
        tiers=get_ladder_tiers,
        seed=config["seed"],
        parts_dir=rpath(LDP.ANSWER_PARTS),
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/answers/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/answers/{{model}}.tsv"
    resources:
        **model_resources(get_model_spec, runtime=planned_runtime("ladder_answers", 120)),
    script:
        "../scripts/run_job.py"


rule ladder_sessions:
    # the simulated users' replies to those answers; loads the LLM user only
    input:
        get_ladder_user_files,
        answers_path=rules.ladder_answers.output.out,
        items_path=rpath(SP.ITEMS, dataset=LAD["dataset"], split="test"),
    output:
        out_main=rpath(LDP.SESSIONS, run="main"),
        out_alt=rpath(LDP.SESSIONS, run="alt_user"),
    params:
        job="selfknow.protocols.ladder.jobs:sessions_job",
        weights=model_weights(get_ladder_user_spec),
        user_spec=get_ladder_user_spec,
        user=LAD["user"],
        n_sessions=LAD["n_sessions"],
        n_turns=LAD["n_turns"],
        alt_sessions=LAD["llm_user_sessions"],
        items_per_domain=LAD["items_per_domain"],
        user_max_new_tokens=LAD["user_max_new_tokens"],
        seed=config["seed"],
        parts_dir=rpath(LDP.PARTS),
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/sessions/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/sessions/{{model}}.tsv"
    resources:
        **model_resources(get_ladder_user_spec, runtime=planned_runtime("ladder_user", 120)),
    script:
        "../scripts/run_job.py"


rule ladder_prompted:
    input:
        get_ladder_prompted_files,
        turns_path=rules.ladder_sessions.output.out_main,
    output:
        out_profiles=rpath(LDP.PROMPTED, part="profiles"),
        out_query=rpath(LDP.PROMPTED, part="query"),
    params:
        job="selfknow.protocols.ladder.jobs:prompted_job",
        weights=model_weights(get_ladder_prompted_spec),
        spec=get_ladder_prompted_spec,
        mode=LAD["prompted_mode"],
        max_new_tokens=LAD["prompted_max_new_tokens"],
        lsa_query_sessions=LAD["lsa_query_sessions"],
        prompted_sessions=LAD["prompted_sessions"],
        lsa_controls=LAD["lsa_controls"],
        seed=config["seed"],
        cache_dir=f"{R}/cache",
    threads: 1
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/prompted/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/ladder/prompted/{{model}}.tsv"
    resources:
        **model_resources(get_ladder_prompted_spec, runtime=planned_runtime("ladder_prompted", 120)),
    script:
        "../scripts/run_job.py"


rule ladder_score:
    input:
        turns_path=rules.ladder_sessions.output.out_main,
        alt_turns_path=rules.ladder_sessions.output.out_alt,
        profiles_path=rules.ladder_prompted.output.out_profiles,
        query_path=rules.ladder_prompted.output.out_query,
    output:
        **ladder_score_outputs(),
    params:
        job="selfknow.protocols.ladder.jobs:score_job",
        seed=config["seed"],
        latent_query=LAD["latent_query"],
        session_bootstrap_draws=LAD["session_bootstrap"],
        cluster_bootstrap_draws=LAD["cluster_bootstrap"],
        cluster_estimators=LAD["cluster_estimators"],
        flips=LAD["noise_flips"],
        coverages=LAD["noise_coverages"],
        noise_repeats=LAD["noise_repeats"],
        grid_sessions=LAD["grid_sessions"],
        grid_estimators=LAD["grid_estimators"],
        random_partitions=LAD["random_partitions"],
        partition=LAD["partition"] if "partition" in LAD else None,
        prefix_step=LAD["prefix_step"],
        prefix_estimators=LAD["prefix_estimators"],
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
        "../scripts/run_job.py"


rule ladder_tables:
    input:
        unpack(get_ladder_score_parts),
    output:
        **named_table_targets("ladder", LADDER_TABLES),
        **ladder_figure_targets(),
    params:
        job="selfknow.protocols.ladder.rule_jobs:tables_job",
        config=job_config(config, sections=["ladder"]),
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/ladder/tables.log",
    script:
        "../scripts/run_job.py"

