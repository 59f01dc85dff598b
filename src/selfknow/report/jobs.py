"""The workflow's jobs for the tables of the shared stages (the judge audit, the world's
evolution, the card; their catalogs: `selfknow.report.catalog.SHARED`), each called by
`selfknow.runner` with its rule's keys by name, and the builders of the world's and the
judge's tables, which give the stages' own tables (`selfknow.world.evolution`,
`selfknow.stages.jobs`) the one builder return type of the report."""
from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from .catalog import JUDGE_CATALOG, WORLD_CATALOG, Catalog
from .tables import Built, table_job_provenance, write_entries


def write_catalog(catalog: Catalog, known: dict, outputs: Mapping[str, str], provenance: dict) -> dict:
    """Every entry of a shared stage's `catalog`, written through the one driver
    (`write_entries`); what its job reports: the summaries of what they built, together."""
    built = write_entries(catalog.tables, known, outputs, provenance=provenance)
    return {k: v for b in built.values() for k, v in b.summary.items()}


def judge_audit(judged: pd.DataFrame, replicates: int, seed: int) -> Built:
    """The judge audit table and its note (`selfknow.stages.jobs.judge_audit_table`)."""
    from selfknow.stages.jobs import judge_audit_table

    table, note = judge_audit_table(judged, replicates=replicates, seed=seed)
    return Built(table, (note,))


def judge_audit_job(judgments: str, replicates: int, seed: int, models: Sequence[str], report: Mapping,
                    outputs: Mapping[str, str], config: Mapping, input_files: Sequence[str]) -> dict:
    """The judge audit table (rules/judge.smk) from the judge's audit records; `models`: the
    judge and the models whose answers it graded."""
    from selfknow.records import read_parquet

    prov = table_job_provenance(config, input_files, report, sections=["judge"], models=list(models),
                                datasets=[config["judge"]["audit_dataset"]])
    known = {"judged": read_parquet(judgments), "replicates": replicates, "seed": seed}
    return write_catalog(JUDGE_CATALOG, known, outputs, prov)


def evolution(generation_paths: Mapping[str, str], checkpoints: Mapping[str, Sequence[str]], n_train: int,
              curriculum_path: str) -> Built:
    """The world's table across checkpoints and its notes (`selfknow.world.evolution.evolution_tables`);
    its job reports the checkpoint pairs and the smallest contrast set."""
    from selfknow.world.evolution import evolution_tables

    table, notes = evolution_tables(dict(generation_paths), dict(checkpoints), n_train, curriculum_path)
    return Built(table, tuple(notes), summary={"pairs": len(table), "min_contrast": int(table["contrast_size"].min())})


def world_evolution_job(inputs: Mapping[str, str], checkpoints: Mapping[str, Sequence[str]], n_train: int,
                        report: Mapping, outputs: Mapping[str, str], config: Mapping,
                        input_files: Sequence[str]) -> dict:
    """The world's knowledge across checkpoints (rules/world.smk), from each world model's
    greedy answers (`inputs` but `curriculum`) and the curriculum."""
    prov = table_job_provenance(config, input_files, report, sections=["world"], models=list(checkpoints),
                                datasets=[config["world"]["qa_dataset"]])
    known = {"generation_paths": {k: v for k, v in inputs.items() if k != "curriculum"},
             "checkpoints": checkpoints, "n_train": n_train, "curriculum_path": inputs["curriculum"]}
    return write_catalog(WORLD_CATALOG, known, outputs, prov)
