# LADDER (SPEC §2) input functions and constants; the rules are in rules/ladder*.smk.
from selfknow.protocols.ladder.catalog import APPENDIX_PARTS as LADDER_APPENDIX_PARTS
from selfknow.protocols.ladder.catalog import SCORE_PARTS

LADDER_TABLES = names(LADDER_CATALOG, job="tables", figure=False)
LADDER_FIGURES = names(LADDER_CATALOG, job="tables", figure=True)
LADDER_APPENDIX_TABLES = names(LADDER_CATALOG, job="appendix", figure=False)
LADDER_APPENDIX_FIGURES = names(LADDER_CATALOG, job="appendix", figure=True)

LAD = config["ladder"]
LADDER_MODELS = list(LAD["models"])


def ladder_model_spec(name):
    return model_spec(config, name, R)


def ladder_is_chat(name):
    return is_chat(_model_entry(name))


def ladder_prompted_name(name):
    """Who answers the prompted levels (L1, L2, L4) of model `name`: the model itself if it is
    a chat model, else ladder.prompted_model."""
    if ladder_is_chat(name):
        return name
    if "prompted_model" not in LAD:
        raise WorkflowError(f"ladder: model '{name}' is a base LM; set ladder.prompted_model")
    return LAD["prompted_model"]


def get_ladder_prompted_spec(wildcards):
    return ladder_model_spec(ladder_prompted_name(wildcards.model))


def get_ladder_prompted_files(wildcards):
    return model_files(ladder_prompted_name(wildcards.model))


def ladder_user_name(model):
    """The LLM user of answering model `model`: ladder.user_models[model], else llm_user_model."""
    if "user_models" in LAD and model in LAD["user_models"]:
        return LAD["user_models"][model]
    return LAD["llm_user_model"] if "llm_user_model" in LAD else None


def get_ladder_user_spec(wildcards):
    """The LLM user's spec, or None when no session of the run uses the LLM user."""
    if ladder_user_name(wildcards.model) is None or not ladder_uses_llm_user():
        return None
    return ladder_model_spec(ladder_user_name(wildcards.model))


def ladder_uses_llm_user():
    return LAD["user"] == "llm" or LAD["llm_user_sessions"] > 0


def get_ladder_user_files(wildcards):
    """The LLM user's files when it simulates any session of the model's."""
    user = ladder_user_name(wildcards.model)
    return model_files(user) if ladder_uses_llm_user() and user else []


def get_ladder_tiers(wildcards):
    """The model's given subject tiers (ladder.tiers), or None: tiers from the pool's answers."""
    return LAD["tiers"][wildcards.model] if "tiers" in LAD and wildcards.model in LAD["tiers"] else None


#: a chat model's answer settings (answers_job's `answering`)
LADDER_ANSWERING = {"format": LAD["answer_format"], "temperature": LAD["answer_temperature"],
                    "max_new_tokens": LAD["answer_max_new_tokens"], "per_turn": LAD["answer_per_turn"],
                    "failed_call": LAD["failed_answer_call"]}


def ladder_score_outputs():
    return {p: rpath(LDP.SCORES, part=p) for p in SCORE_PARTS}


def get_ladder_score_parts(wildcards):
    return {p: [rpath(LDP.SCORES, model=m, part=p) for m in LADDER_MODELS] for p in SCORE_PARTS}


def ladder_figure_targets():
    """Figures 4-7: the PNGs (named "<figure>", flagged for the report) and their sidecars."""
    return named_figure_targets("ladder", LADDER_FIGURES)


# Table 34 (rules/ladder_heldout.smk)
def react_dirs():
    """The directory of each ReAct configuration's produced records (ladder.react)."""
    return [rpath(LDP.REACT, model=c["model"], react_config=c["name"]) for c in LAD["react"]["configurations"]]


def get_ladder_table34_inputs(wildcards):
    """The ReAct records the ladder_react rule produces (ladder.react); else the offline
    analogue's inputs: every LADDER model's sessions and prompted profiles (its ZS prior).
    Nothing for recorded trajectories (ladder.react_dataset): like a paper dataset read by the
    items rule, the local copy is read by the job, not tracked as an input."""
    if "react" in LAD:
        return [rpath(LDP.REACT_RECORDS, model=c["model"], react_config=c["name"], part=f)
                for c in LAD["react"]["configurations"] for f in ("test", "zero_shot")]

    if "react_dataset" in LAD:
        return {}
    return {"turns": [rpath(LDP.SESSIONS, model=m, run="main") for m in LADDER_MODELS],
            "profiles": [rpath(LDP.PROMPTED, model=m, part="profiles") for m in LADDER_MODELS]}


def get_ladder_react_specs(wildcards):
    """The dataset spec (loader react) of each source of ReAct trajectories, or None for the
    offline analogue."""
    if "react" in LAD:
        return [{"loader": "react", "path": d} for d in react_dirs()]
    return [dict(config["datasets"][LAD["react_dataset"]])] if "react_dataset" in LAD else None


def get_react_setting(wildcards):
    """One ReAct configuration's settings (ladder.react.configurations)."""
    return next(c for c in LAD["react"]["configurations"] if c["name"] == wildcards.react_config)


# Table 18, Table 33, Figures 9 and 11 (rules/ladder_appendix.smk)
def get_ladder_appendix_inputs(wildcards):
    """Table 18's optimisation part of every model, Table 33's run configurations (each
    model's main and alternative-user sessions) and the score parts Figures 9 and 11 read."""
    return {"optimisation": [rpath(LDP.SCORES, model=m, part="optimisation") for m in LADDER_MODELS],
            "runs": [rpath(LDP.SESSIONS, model=m, run=k) for m in LADDER_MODELS for k in ("main", "alt_user")],
            **{p: [rpath(LDP.SCORES, model=m, part=p) for m in LADDER_MODELS] for p in LADDER_APPENDIX_PARTS}}
