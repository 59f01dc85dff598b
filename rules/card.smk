# The self-knowledge card (SPEC §4): one row per model joining the three protocols.


rule knowledge_card:
    input:
        unpack(get_card_inputs),
        persistent=input_paths(get_card_persistent),
    output:
        **named_table_targets(CARD_CATALOG.paper, names(CARD_CATALOG.tables)),
    params:
        job="selfknow.report.card:knowledge_card_job",
        config=job_config(config, sections=[s for s in ("lcae", "ladder", "persistent") if s in config], models=MODELS),
        persistent=get_card_persistent,
        models=MODELS,
        last_ckpt=card_last_checkpoints(),
        report=REPORT_SETTINGS,
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/card.log",
    script:
        "../scripts/run_job.py"

