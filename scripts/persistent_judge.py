# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.protocols.persistent.jobs import JudgeIO, judge_job
from selfknow.runlog import job_log

p, w, i, out = snakemake.params, snakemake.wildcards, snakemake.input, snakemake.output
splits = {s: JudgeIO(i[s], i[f"cand_{s}"], out[f"sc_{s}"]) for s in ("train", "test")}
with job_log(snakemake.log[0], f"persistent_judge {w.model}@{w.ckpt} {w.dataset}") as summary:
    summary.update(judge_job(splits, w.model, w.ckpt, dict(p.judge), p.cache))
