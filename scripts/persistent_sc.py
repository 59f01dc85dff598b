# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import sc_job
from selfknow.runlog import job_log

p, w = snakemake.params, snakemake.wildcards
with job_log(snakemake.log[0], f"persistent_sc {w.model}@{w.ckpt} {w.dataset}/{w.split}") as summary:
    summary.update(sc_job(snakemake.input.questions, snakemake.input.train, dict(p.spec), w.ckpt,
                          snakemake.output.beams, snakemake.output.sc, split=w.split, n_items=p.n_items,
                          n_shots=p.n_shots, icl_by_domain=p.icl_by_domain, seed=p.seed, num_beams=p.num_beams,
                          max_new_tokens=p.max_new_tokens, equivalence=p.equivalence, prompt_label=p.prompt_label,
                          cache_dir=p.cache, judge=dict(p.judge), threads=snakemake.threads))
