# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.heldout import react_files, table34_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, cfg = snakemake.params, snakemake.config
react = p.react_specs is not None
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_table34") as summary:
    lad = cfg["ladder"]
    names = ({c["model"] for c in lad["react"]["configurations"]} if "react" in lad
             else set() if react else {*lad["models"], lad.get("prompted_model")})
    models = [m["name"] for m in cfg["models"] if m["name"] in names]
    # recorded trajectories are read, not tracked as inputs (see rules/ladder_heldout.smk): hash them here
    recorded = [f for s in p.react_specs for f in react_files(s)] if react and "react" not in lad else []
    prov = job_provenance(cfg, [*snakemake.input, *recorded], sections=["ladder"], models=models,
                          datasets=[p.dataset])
    summary.update(table34_job(snakemake.output.table34_csv, snakemake.output.table34_md, seed=p.seed,
                               source=("agent" if "react" in lad else "react") if react else "sessions", dataset=p.dataset,
                               react_specs=[dict(s) for s in p.react_specs] if react else (),
                               turns_paths=list(snakemake.input.get("turns", [])),
                               profiles_paths=list(snakemake.input.get("profiles", [])), provenance=prov))
