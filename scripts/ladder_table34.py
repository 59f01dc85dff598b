# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.heldout import react_files, table34_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, cfg = snakemake.params, snakemake.config
react = p.react_spec is not None
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_table34") as summary:
    models = [] if react else [m["name"] for m in cfg["models"]
                               if m["name"] in {*cfg["ladder"]["models"], cfg["ladder"].get("prompted_model")}]
    # the trajectories are read, not tracked as inputs (see rules/ladder_heldout.smk): hash them here
    inputs = [*snakemake.input, *(react_files(p.react_spec) if react else [])]
    prov = job_provenance(cfg, inputs, sections=["ladder"], models=models, datasets=[p.dataset])
    summary.update(table34_job(snakemake.output.table34_csv, snakemake.output.table34_md, seed=p.seed,
                               source="react" if react else "sessions", dataset=p.dataset,
                               react_spec=dict(p.react_spec) if react else None,
                               turns_paths=list(snakemake.input.get("turns", [])),
                               profiles_paths=list(snakemake.input.get("profiles", [])), provenance=prov))
