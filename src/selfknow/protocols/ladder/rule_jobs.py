"""The LADDER workflow's jobs that gather what their package function needs beyond their
rule's keys (config, provenance, the models each table names), each called by
`selfknow.runner` with its rule's keys by name."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from selfknow.config import model_spec, stated_by
from selfknow.models.providers import modes_note
from selfknow.report.tables import table_job_provenance


def _models(config: Mapping, names: set) -> list[str]:
    """The config's models among `names`, in the config's order."""
    return [m["name"] for m in config["models"] if m["name"] in names]


def _answering_models(lad: Mapping) -> set:
    """The answering models, and who answers their prompted levels and simulates the LLM user."""
    return {*lad["models"], *(lad[k] for k in ("prompted_model", "llm_user_model") if k in lad),
            *(lad["user_models"].values() if "user_models" in lad else ())}


def tables_job(inputs: Mapping[str, Sequence[str]], outputs: Mapping[str, str], report: Mapping, config: Mapping,
               input_files: Sequence[str]) -> dict:
    """The main LADDER tables and Figures 4-7 (rules/ladder.smk `ladder_tables`)."""
    from .tables import stated_by, write_tables

    lad = config["ladder"]
    models = _models(config, _answering_models(lad))
    prov = table_job_provenance(config, input_files, report, sections=["ladder"], models=models,
                                datasets=[lad["dataset"]])
    return write_tables(dict(inputs), dict(outputs), provenance=prov,
                        modes_note=modes_note([model_spec(config, m) for m in models]),
                        stated_by=stated_by(config, lad["models"]))


def appendix_job(inputs: Mapping[str, Sequence[str]], outputs: Mapping[str, str], lite_budgets: Sequence[int],
                 report: Mapping, config: Mapping, input_files: Sequence[str]) -> dict:
    """The appendix tables and figures (rules/ladder_appendix.smk)."""
    from .appendix import write_appendix
    from .catalog import APPENDIX_PARTS

    lad = config["ladder"]
    prov = table_job_provenance(config, input_files, report, sections=["ladder"],
                                models=_models(config, _answering_models(lad)), datasets=[lad["dataset"]])
    return write_appendix(inputs["optimisation"], inputs["runs"], {k: inputs[k] for k in APPENDIX_PARTS},
                          dict(outputs), budgets=list(lite_budgets), provenance=prov)


def crosstask_tables_job(inputs: Mapping[str, Sequence[str]], outputs: Mapping[str, str], suites: Mapping[str, dict],
                         loaders: Mapping[str, str], unparsed: str, prior: str, report: Mapping, config: Mapping,
                         input_files: Sequence[str]) -> dict:
    """The cross-task tables (rules/ladder_crosstask.smk)."""
    from .crosstask import write_crosstask_tables
    from .tables import stated_by

    ct = config["ladder"]["cross_task"]
    models = _models(config, {*ct["models"], config["ladder"].get("prompted_model")})
    datasets = [d for s in suites.values() for d in s["datasets"]]
    prov = table_job_provenance(config, input_files, report, sections=["ladder"], models=models, datasets=datasets)
    return write_crosstask_tables({s: inputs[f"{s}_answers"] for s in suites}, {s: inputs[f"{s}_prior"] for s in suites},
                                  {s: dict(v) for s, v in suites.items()}, dict(loaders), unparsed, dict(outputs),
                                  prior=prior, provenance=prov, stated_by=stated_by(config, ct["models"]))


def table32_job(record_paths: Sequence[str], outputs: Mapping[str, str], datasets: Mapping[str, str],
                loaders: Mapping[str, str], sign_tolerance_pp: float, unfence_humaneval: bool, report: Mapping,
                config: Mapping, input_files: Sequence[str]) -> dict:
    """Table 32, the extension tasks (rules/ladder_extension.smk)."""
    from .extension import write_table32

    models = config["ladder"]["extension"]["models"]
    prov = table_job_provenance(config, input_files, report, sections=["ladder"], models=list(models),
                                datasets=sorted(set(datasets.values())))
    return write_table32(record_paths, dict(outputs), datasets=dict(datasets),
                         loaders=dict(loaders), sign_tolerance_pp=sign_tolerance_pp,
                         unfence_humaneval=unfence_humaneval, provenance=prov,
                         modes_note=modes_note([model_spec(config, m) for m in models]))


def table34_job(outputs: Mapping[str, str], seed: int, react_specs: Sequence[dict] | None, dataset: str,
                report: Mapping, config: Mapping, input_files: Sequence[str], turns: Sequence[str] = (),
                profiles: Sequence[str] = ()) -> dict:

    """Table 34, held-out accuracy prediction (rules/ladder_heldout.smk): from the ReAct
    agent's records (`ladder.react`), recorded trajectories (`ladder.react_dataset`), or the
    offline analogue's sessions and prompted profiles."""
    from .heldout import react_files, write_table34

    lad = config["ladder"]
    has_react = react_specs is not None
    names = ({c["model"] for c in lad["react"]["configurations"]} if "react" in lad
             else set() if has_react else {*lad["models"], lad.get("prompted_model")})
    # recorded trajectories are read, not tracked as inputs (see rules/ladder_heldout.smk): hash them here
    recorded = [f for s in react_specs for f in react_files(s)] if has_react and "react" not in lad else []
    prov = table_job_provenance(config, [*input_files, *recorded], report, sections=["ladder"],
                                models=_models(config, names), datasets=[dataset])
    return write_table34(dict(outputs), seed=seed,
                         source=("agent" if "react" in lad else "react") if has_react else "sessions",
                         dataset=dataset, react_specs=[dict(s) for s in react_specs] if has_react else (),
                         turns_paths=list(turns), profiles_paths=list(profiles),
                         stated_by=stated_by(config, lad["models"]), provenance=prov)


def import_job(import_dir: str, estimators: Sequence[str], outputs: Mapping[str, str], report: Mapping,
               config: Mapping) -> dict:
    """The aggregates of released sessions (rules/ladder_import.smk), scored with the
    importer's estimators and `estimators` (config `ladder_import_estimators`) after them."""
    from .tables import IMPORT_ESTIMATORS
    from .tables import import_job as write_import

    # the released sessions are this job's input: their directory is fingerprinted
    prov = table_job_provenance(config, [import_dir], report,
                                sections=["ladder_import_dir", "ladder_import_estimators"])
    return write_import(import_dir, dict(outputs), list(dict.fromkeys([*IMPORT_ESTIMATORS, *estimators])),
                        provenance=prov)


def react_job(items_path: str, spec: dict, test: str, zero_shot: str, model: str, react_config: str,
              setting: Mapping, per_domain: int, max_new_tokens: int, prior_mode: str, prior_max_new_tokens: int,
              seed: int, cache_dir: str) -> dict:
    """One ReAct configuration's records (rules/ladder_heldout.smk), in the directory of its
    outputs `test` and `zero_shot`."""
    from .react_agent import react_job as run_react

    return run_react(items_path, dict(spec), str(Path(test).parent), model=model, config=react_config,
                     per_domain=per_domain, max_steps=setting["max_steps"], max_new_tokens=max_new_tokens,
                     prior_mode=prior_mode, prior_max_new_tokens=prior_max_new_tokens, seed=seed,
                     cache_dir=cache_dir)
