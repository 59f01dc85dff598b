# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.records import read_parquet
from selfknow.report.catalog import SHARED_TABLE
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals, write_table
from selfknow.runlog import job_log

cfg = snakemake.config
persistent_models = cfg["persistent"]["models"] if "persistent" in cfg else []
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "judge_audit_table"):
    # the judge, and the models whose answers it graded (the last checkpoints of the persistent models)
    prov = job_provenance(cfg, snakemake.input, sections=["judge"],
                          models=list(dict.fromkeys([cfg["judge"]["llm_judge"], *persistent_models])),
                          datasets=[cfg["judge"]["audit_dataset"]])
    entry = SHARED_TABLE["judge/audit"]
    table, notes = entry.build()(read_parquet(snakemake.input[0]), replicates=snakemake.params.replicates,
                                 seed=snakemake.params.seed)
    write_table(table, snakemake.output.audit_csv, snakemake.output.audit_md, title=entry.title, notes=notes,
                provenance=prov)
