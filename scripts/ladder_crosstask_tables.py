# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.crosstask import write_crosstask_tables
from selfknow.protocols.ladder.tables import stated_by
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, cfg, inp = snakemake.params, snakemake.config, snakemake.input
ct = cfg["ladder"]["cross_task"]
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_crosstask_tables") as summary:
    models = [m["name"] for m in cfg["models"] if m["name"] in {*ct["models"], cfg["ladder"].get("prompted_model")}]
    datasets = [d for s in p.suites.values() for d in s["datasets"]]
    prov = job_provenance(cfg, inp, sections=["ladder"], models=models, datasets=datasets)
    summary.update(write_crosstask_tables({s: list(getattr(inp, f"{s}_answers")) for s in p.suites},
                                          {s: list(getattr(inp, f"{s}_prior")) for s in p.suites},
                                          {s: dict(v) for s, v in p.suites.items()}, dict(p.loaders), p.unparsed,
                                          dict(snakemake.output.items()), prior=p.prior, provenance=prov,
                                          stated_by=stated_by(cfg, ct["models"])))
