# selfknow: one DAG from item sampling to every table of three papers on LLM self-knowledge.
# Targets only: configuration, includes, the default target and one rule per table family.
from snakemake.utils import min_version

min_version("9.0")


# The offline default, unless `--configfile` names another config: merging the default under
# a paper config would leak its mini-world models and settings into the paper run.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


# `snakemake --report results/report.html`: every table and figure, captioned from
# workflow_report/ (see its catalog.yaml), under this description.
report: "workflow_report/workflow.rst"


# A protocol's rules exist only when the config has its section.
include: "rules/common.smk"


# Before a launch (not a dry run) of a config with `preflight: true`: stop on any problem with
# its endpoints, keys, hub models or datasets (selfknow.preflight), and, when jobs run on other
# nodes (--profile slurm), with a model served at localhost; SELFKNOW_SKIP_PREFLIGHT=1 skips.
onstart:
    from selfknow.preflight import preflight_or_stop

    preflight_or_stop(config, cluster=workflow.non_local_exec)


include: "rules/models.smk"
include: "rules/data.smk"
include: "rules/generate.smk"


if "world" in config:

    include: "rules/world.smk"


if "llm_judge" in config["judge"]:

    include: "rules/judge.smk"


if "lcae" in config:

    include: "rules/lcae.smk"


if "persistent" in config:

    include: "rules/persistent_common.smk"
    include: "rules/persistent.smk"


if "ladder" in config:

    include: "rules/ladder_common.smk"
    include: "rules/ladder.smk"
    include: "rules/ladder_heldout.smk"
    include: "rules/ladder_appendix.smk"

    if "cross_task" in config["ladder"]:

        include: "rules/ladder_crosstask_common.smk"
        include: "rules/ladder_crosstask.smk"

    if "extension" in config["ladder"]:

        include: "rules/ladder_extension_common.smk"
        include: "rules/ladder_extension.smk"


if "ladder_import_dir" in config:

    include: "rules/ladder_import.smk"


include: "rules/card.smk"


localrules:
    all_tables,


rule all_tables:
    default_target: True
    input:
        all_table_files(),
        generation_files(),


# Code is an input. Every rule's job runs through one script (scripts/run_job.py) that calls the
# package function its param `job` names; Snakemake watches that script, not the package code, so
# every such rule gets a param `code`: the fingerprint of the package definitions its job reaches
# (selfknow.code_inputs, read from the source, never imported). An edit to a function reruns the
# jobs that reach it, and what reads their outputs; nothing else. It is computed when a rule's
# first job is built, once per job function, so listing rules costs nothing.
from selfknow.code_inputs import job_fingerprint

for _rule in workflow.rules:
    if _rule.script is not None:
        _rule.set_params(code=lambda wildcards, job=_rule.params.job: job_fingerprint(job))
