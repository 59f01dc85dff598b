# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
from selfknow.models.gguf_convert import convert_gguf_to_hf, smollm2_gguf_path
from selfknow.runlog import job_log

with job_log(snakemake.log[0], "smollm2_convert"):
    convert_gguf_to_hf(smollm2_gguf_path(), snakemake.output[0])
