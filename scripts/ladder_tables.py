# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.tables import FIGURES, write_tables
from selfknow.runlog import job_log

out = dict(snakemake.output.items())
with job_log(snakemake.log[0], "ladder_tables") as summary:
    summary.update(write_tables({k: list(v) for k, v in snakemake.input.items()},
                                {k: v for k, v in out.items() if k not in FIGURES},
                                {k: v for k, v in out.items() if k in FIGURES}))
