# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.tables import figure2_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
# inputs named "metrics__<model>__<dataset>", "replicates__<model>__<dataset>",
# "test__<model>__<checkpoint>__<dataset>" and "backbone__<dataset>"
inp = {tuple(k.split("__")): v for k, v in snakemake.input.items()}
metric_paths = {(m, d): (v, inp[("replicates", m, d)]) for (kind, *rest), v in inp.items() if kind == "metrics"
                for m, d in [rest]}
eval_sc = {tuple(rest): v for (kind, *rest), v in inp.items() if kind == "test"}
backbone_sc = {rest[0]: v for (kind, *rest), v in inp.items() if kind == "backbone"}
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "persistent_figure2") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], models=[*p.models, p.backbone_model],
                          datasets=list(p.datasets))
    summary.update(figure2_job(metric_paths, eval_sc, backbone_sc, list(p.models),
                               {m: list(c) for m, c in p.eval_ckpts.items()}, list(p.datasets), out.figure2,
                               out.figure2_csv, out.figure2_md, min_contrast=p.min_contrast,
                               backbone=f"{p.backbone_model} ({p.backbone_ckpt})", title=p.title, provenance=prov))
