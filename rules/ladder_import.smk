# The importer of released LADDER sessions (`ladder_import_dir`): scores them with the
# estimators that need no model call.


rule ladder_import:
    output:
        **named_table_targets("ladder", names(LADDER_CATALOG, job="import")),
    params:
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
        "../scripts/ladder_import.py"
