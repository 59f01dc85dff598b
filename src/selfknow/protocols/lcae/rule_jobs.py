"""The LCAE workflow's jobs that gather what their package function needs beyond their rule's
keys (config, provenance), each called by `selfknow.runner` with its rule's keys by name."""
from __future__ import annotations

from typing import Mapping, Sequence

from selfknow.config import is_chat, model_spec
from selfknow.models.providers import modes_note
from selfknow.report.tables import table_job_provenance

from .jobs import stage2_repeats_shared
from .tables import write_tables


def tables_job(stage3_path: str, persons_path: str, items_path: str, outputs: Mapping[str, str],
               prices: Mapping, method: str, eps: float, report: Mapping, config: Mapping,
               input_files: Sequence[str]) -> dict:
    """Every LCAE table and figure (rules/lcae.smk `lcae_tables`); its log gives the rows of each
    (a figure's: its points)."""
    lc = config["lcae"]
    prov = table_job_provenance(config, input_files, report, sections=["lcae"], models=lc["examinee_models"],
                                datasets=[lc["dataset"]])
    specs = {m: model_spec(config, m) for m in lc["examinee_models"]}
    built = write_tables(stage3_path, persons_path, items_path, dict(outputs), dict(prices),
                         [m for m, s in specs.items() if stage2_repeats_shared(s, lc["stage2_temperature"])],
                         method=method, eps=eps, base_models=[m for m, s in specs.items() if not is_chat(s)],
                         base_error_p=lc["base_error_p"], provenance=prov, modes_note=modes_note(list(specs.values())))
    return {f"{name}_rows": len(b.table) for name, b in built.items()}
