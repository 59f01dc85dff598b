# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import figure2_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "persistent_figure2") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], models=[*p.models, p.backbone_model],
                          datasets=list(p.datasets))
    summary.update(figure2_job(p.metrics, p.sc, list(p.models), {m: list(c) for m, c in p.eval_ckpts.items()},
                               list(p.datasets), out.figure2, out.figure2_csv, out.figure2_md,
                               min_contrast=p.min_contrast, backbone_model=p.backbone_model,
                               backbone_ckpt=p.backbone_ckpt, title=p.title, provenance=prov))
