# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.lcae.tables import write_tables
from selfknow.runlog import job_log

with job_log(snakemake.log[0], "lcae_tables") as summary:
    summary.update(write_tables(snakemake.input.stage3, snakemake.input.item_params, dict(snakemake.output.items()),
                                snakemake.output.figure2, dict(snakemake.params.prices)))
