# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import SplitIO, sc_job
from selfknow.runlog import job_log

p, w, out = snakemake.params, snakemake.wildcards, snakemake.output
splits = {s: SplitIO(snakemake.input[s], p.n_items[s], out[f"beams_{s}"], out[f"sc_{s}"]) for s in p.n_items}
with job_log(snakemake.log[0], f"persistent_sc {w.model}@{w.ckpt} {w.dataset}") as summary:
    summary.update(sc_job(splits, snakemake.input.train, dict(p.spec), w.ckpt, n_shots=p.n_shots,
                          icl_by_domain=p.icl_by_domain, seed=p.seed, num_beams=p.num_beams,
                          max_new_tokens=p.max_new_tokens, equivalence=p.equivalence,
                          normalisation=p.normalisation, prompt_label=p.prompt_label,
                          cache_dir=p.cache, correctness=p.correctness, threads=snakemake.threads))
