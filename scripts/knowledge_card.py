# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.report.card import card_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

cfg = snakemake.config
inp = dict(snakemake.input.items())
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "knowledge_card") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=[s for s in ("lcae", "ladder", "persistent") if s in cfg],
                          models=list(snakemake.params.models))
    summary.update(card_job(list(snakemake.params.models), dict(snakemake.params.last_ckpt),
                            lcae_persons=inp.get("lcae_persons"), lcae_stage3=inp.get("lcae_stage3"),
                            ladder_main=inp.get("ladder_main"), persistent=snakemake.params.persistent,
                            csv=snakemake.output.self_knowledge_csv, md=snakemake.output.self_knowledge_md,
                            provenance=prov))
