# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.ladder.extension import TASKS, extension_job
from selfknow.runlog import job_log

p = snakemake.params
with job_log(snakemake.log[0], f"ladder_extension {snakemake.wildcards.model}") as summary:
    summary.update(extension_job({t: snakemake.input[t] for t in TASKS}, dict(p.spec), snakemake.output[0],
                                 model=snakemake.wildcards.model, datasets=dict(p.datasets), n_items=dict(p.n_items),
                                 max_new_tokens=dict(p.max_new_tokens),
                                 confidence_max_new_tokens=p.confidence_max_new_tokens, sandbox=dict(p.sandbox),
                                 unfence_humaneval=p.unfence_humaneval,
                                 seed=p.seed, cache_dir=p.cache))
