# LADDER's cross-task priors (paper §E.1, Tables 14 and 15): input functions and constants;
# the rules are in rules/ladder_crosstask.smk. Included after rules/ladder_common.smk.

CT = LAD["cross_task"]
CT_SUITES = list(CT["suites"])
CT_TABLES = [t.name for t in LADDER_BUILT if t.job == "crosstask"]


def crosstask_loader(suite):
    """The one loader of the suite's datasets (checked when the config is loaded)."""
    return config["datasets"][CT["suites"][suite]["datasets"][0]]["loader"]


def get_crosstask_items(wildcards):
    sc = CT["suites"][wildcards.suite]
    return [rpath(SP.ITEMS, dataset=d, split=sc["split"]) for d in sc["datasets"]]


def get_crosstask_model_files(wildcards):
    """The answering model's files, plus those of the model that states its prior when it is
    asked."""
    files = model_files(wildcards.model)
    if CT["prior"] == "l1":
        return files
    return files + [f for f in model_files(ladder_prompted_name(wildcards.model)) if f not in files]


def get_crosstask_l1(wildcards):
    """LADDER's prompted profiles of the model, whose L1 prior the job reads (prior 'l1')."""
    return [rpath(LDP.PROMPTED, model=wildcards.model, part="profiles")] if CT["prior"] == "l1" else []


def get_crosstask_prompt_spec(wildcards):
    """The spec of the model that states the prior, when it is asked."""
    return None if CT["prior"] == "l1" else get_ladder_prompted_spec(wildcards)


def get_crosstask_suite(wildcards):
    return dict(CT["suites"][wildcards.suite])


def get_crosstask_loader(wildcards):
    return crosstask_loader(wildcards.suite)


def get_crosstask_outputs(wildcards):
    return {f"{s}_{part}": [rpath(LDP.CROSSTASK, suite=s, model=m, part=part) for m in CT["models"]]
            for s in CT_SUITES for part in ("answers", "prior")}
