# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from pathlib import Path

from selfknow.protocols.ladder.react_agent import react_job
from selfknow.runlog import job_log

p, w = snakemake.params, snakemake.wildcards
with job_log(snakemake.log[0], f"ladder_react {w.model} {w.react_config}") as summary:
    summary.update(react_job(snakemake.input.pool, dict(p.spec), str(Path(snakemake.output.test).parent),
                             model=w.model, config=w.react_config, per_domain=p.per_domain,
                             max_steps=p.setting["max_steps"], max_new_tokens=p.max_new_tokens,
                             prior_mode=p.prior_mode, prior_max_new_tokens=p.prior_max_new_tokens, seed=p.seed,
                             cache_dir=p.cache))
