# Every rule's job (selfknow.runner); `snakemake` is bound by the script preamble Snakemake inserts.
from selfknow.runner import run_job

run_job(snakemake)
