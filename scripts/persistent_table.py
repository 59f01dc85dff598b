# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import table_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
pc = cfg["persistent"]
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], f"persistent_table {p.table}") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"],
                          models=[*pc["models"], *([pc["gcm_model"]] if pc.get("gcm_model") else [])],
                          datasets=[*pc["datasets"], *([pc["transfer_dataset"]] if pc.get("transfer_dataset") else [])])
    summary.update(table_job(p.table, p.files, list(p.models), list(p.datasets), p.transfer,
                             out[f"{p.table}_csv"], out[f"{p.table}_md"], min_contrast=p.min_contrast,
                             min_contrast_transfer=p.min_contrast_transfer, seeds=list(p.seeds),
                             provenance=prov))
