# The importer of LADDER sessions (`ladder_import_dir`: released files or session tables):
# scores them with the estimators that need no model call, as `selfknow ladder-eval` does
# (both call protocols.ladder.tables.import_job).


rule ladder_import:
    output:
        **named_table_targets("ladder", names(LADDER_CATALOG, job="import")),
    params:
        job="selfknow.protocols.ladder.rule_jobs:import_job",
        config=job_config(config, sections=["ladder_import_dir", "ladder_import_estimators"]),
        import_dir=config["ladder_import_dir"],
        estimators=config["ladder_import_estimators"],
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
        "../scripts/run_job.py"

