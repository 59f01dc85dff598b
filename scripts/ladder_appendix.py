# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.appendix import FIGURES, write_appendix
from selfknow.protocols.ladder.catalog import APPENDIX_PARTS
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

out, cfg, inp = dict(snakemake.output.items()), snakemake.config, snakemake.input
lad = cfg["ladder"]
# the answering models, and who answers their prompted levels (ZS, LSA in Figure 11) and
# simulates the LLM user
names = {*lad["models"], *(lad[k] for k in ("prompted_model", "llm_user_model") if k in lad),
         *lad.get("user_models", {}).values()}
models = [m["name"] for m in cfg["models"] if m["name"] in names]
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "ladder_appendix") as summary:
    prov = job_provenance(cfg, inp, sections=["ladder"], models=models, datasets=[lad["dataset"]])
    summary.update(write_appendix(list(inp.optimisation), list(inp.runs), {k: list(inp[k]) for k in APPENDIX_PARTS},
                                  {k: v for k, v in out.items() if k not in FIGURES},
                                  {k: out[k] for k in FIGURES}, budgets=list(snakemake.params.lite_budgets),
                                  provenance=prov))
