# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.config import model_spec
from selfknow.models.providers import modes_note
from selfknow.protocols.ladder.extension import table32_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_table32") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["ladder"], models=list(cfg["ladder"]["extension"]["models"]),
                          datasets=sorted(set(p.datasets.values())))
    summary.update(table32_job(list(snakemake.input), out.table32_csv, out.table32_md, datasets=dict(p.datasets),
                               loaders=dict(p.loaders), sign_tolerance_pp=p.sign_tolerance_pp,
                               unfence_humaneval=p.unfence_humaneval, provenance=prov,
                               modes_note=modes_note([model_spec(cfg, m) for m in cfg["ladder"]["extension"]["models"]])))
