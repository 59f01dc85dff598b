# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log
from selfknow.world.evolution import write_evolution_table

cfg = snakemake.config
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "world_evolution_table") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["world"], models=list(snakemake.params.checkpoints),
                          datasets=[d for d in cfg.get("persistent", {}).get("datasets", ["world_qa"])[:1]
                                    if d in cfg["datasets"]])
    summary.update(write_evolution_table(dict(snakemake.input.items()), dict(snakemake.params.checkpoints),
                                         snakemake.params.n_train, snakemake.output.evolution_csv,
                                         snakemake.output.evolution_md, provenance=prov))
