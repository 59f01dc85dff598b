# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.tables import import_job
from selfknow.runlog import job_log

with job_log(snakemake.log[0], "ladder_import") as summary:
    summary.update(import_job(snakemake.params.import_dir, snakemake.output[0],
                              list(snakemake.params.estimators) or None))
