# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.config import model_spec
from selfknow.models.providers import modes_note
from selfknow.protocols.ladder.tables import FIGURES, stated_by, write_tables
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

out, cfg = dict(snakemake.output.items()), snakemake.config
lad = cfg["ladder"]
# the answering models, and who answers their prompted levels and simulates the LLM user
models = [m["name"] for m in cfg["models"]
          if m["name"] in {*lad["models"], lad.get("prompted_model"), lad.get("llm_user_model"),
                           *lad.get("user_models", {}).values()}]
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_tables") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["ladder"], models=models, datasets=[lad["dataset"]])
    summary.update(write_tables({k: list(v) for k, v in snakemake.input.items()},
                                {k: v for k, v in out.items() if k not in FIGURES},
                                {k: out[k] for k in FIGURES}, provenance=prov,
                                modes_note=modes_note([model_spec(cfg, m) for m in models]),
                                stated_by=stated_by(cfg, lad["models"])))
