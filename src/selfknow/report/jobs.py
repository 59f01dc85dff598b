"""The workflow's jobs for the tables of the shared stages (the judge audit, the world's
evolution; their catalog: `selfknow.report.catalog.SHARED`), each called by `selfknow.runner`
with its rule's keys by name."""
from __future__ import annotations

from typing import Mapping, Sequence

from .catalog import SHARED_TABLE
from .tables import table_job_provenance, write_table


def judge_audit_job(judgments: str, replicates: int, seed: int, models: Sequence[str], report: Mapping,
                    outputs: Mapping[str, str], config: Mapping, input_files: Sequence[str]) -> None:
    """The judge audit table (rules/judge.smk) from the judge's audit records; `models`: the
    judge and the models whose answers it graded."""
    from selfknow.records import read_parquet

    prov = table_job_provenance(config, input_files, report, sections=["judge"], models=list(models),
                                datasets=[config["judge"]["audit_dataset"]])
    entry = SHARED_TABLE["judge/audit"]
    table, notes = entry.build()(read_parquet(judgments), replicates=replicates, seed=seed)
    write_table(table, outputs["audit_csv"], outputs["audit_md"], title=entry.title, notes=notes, provenance=prov)


def world_evolution_job(inputs: Mapping[str, str], checkpoints: Mapping[str, Sequence[str]], n_train: int,
                        report: Mapping, outputs: Mapping[str, str], config: Mapping,
                        input_files: Sequence[str]) -> dict:
    """The world's knowledge across checkpoints (rules/world.smk), from each world model's
    greedy answers (`inputs` but `curriculum`) and the curriculum."""
    prov = table_job_provenance(config, input_files, report, sections=["world"], models=list(checkpoints),
                                datasets=[config["world"]["qa_dataset"]])
    entry = SHARED_TABLE["world/evolution"]
    generations = {k: v for k, v in inputs.items() if k != "curriculum"}
    table, notes = entry.build()(generations, dict(checkpoints), n_train, inputs["curriculum"])
    write_table(table, outputs["evolution_csv"], outputs["evolution_md"], notes="\n\n".join(notes), provenance=prov,
                title=entry.title)
    return {"pairs": len(table), "min_contrast": int(table["contrast_size"].min())}
