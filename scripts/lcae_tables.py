# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.config import is_chat, model_spec
from selfknow.models.providers import modes_note
from selfknow.protocols.lcae.jobs import stage2_repeats_shared
from selfknow.protocols.lcae.tables import write_tables
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

lc = snakemake.config["lcae"]
set_decimals(snakemake.params.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], "lcae_tables") as summary:
    prov = job_provenance(snakemake.config, snakemake.input, sections=["lcae"], models=lc["examinee_models"],
                          datasets=[lc["dataset"]])
    specs = {m: model_spec(snakemake.config, m) for m in lc["examinee_models"]}
    summary.update(write_tables(snakemake.input.stage3, snakemake.input.persons, snakemake.input.item_params,
                                dict(snakemake.output.items()), snakemake.output.figure2,
                                dict(snakemake.params.prices),
                                [m for m, s in specs.items() if stage2_repeats_shared(s, lc["stage2_temperature"])],
                                method=snakemake.params.method, eps=snakemake.params.eps,
                                base_models=[m for m, s in specs.items() if not is_chat(s)], provenance=prov,
                                modes_note=modes_note(list(specs.values()))))
