# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.lcae.jobs import irt_job
from selfknow.runlog import job_log

with job_log(snakemake.log[0], "lcae_irt") as summary:
    summary.update(irt_job(list(snakemake.input), snakemake.output.persons, snakemake.output.item_params,
                           method=snakemake.params.method))
