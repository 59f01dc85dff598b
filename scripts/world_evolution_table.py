# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.report.catalog import SHARED_TABLE
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals, write_table
from selfknow.runlog import job_log

cfg, out = snakemake.config, snakemake.output
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "world_evolution_table") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["world"], models=list(snakemake.params.checkpoints),
                          datasets=[cfg["world"]["qa_dataset"]])
    entry = SHARED_TABLE["world/evolution"]
    generations = {k: v for k, v in snakemake.input.items() if k != "curriculum"}
    table, notes = entry.build()(generations, dict(snakemake.params.checkpoints), snakemake.params.n_train,
                                 snakemake.input.curriculum)
    write_table(table, out.evolution_csv, out.evolution_md, notes="\n\n".join(notes), provenance=prov,
                title=entry.title)
    summary.update({"pairs": len(table), "min_contrast": int(table["contrast_size"].min())})
