"""The LADDER paper's catalog (the pattern of `selfknow.report.catalog`): every table and
figure, each listed once, with the job that writes it and what it needs of the config
(`config_has`), and the score parts the jobs pass between them. The Snakefile reads this module
when it is parsed (twice per job on a cluster), so it imports nothing heavy."""
from __future__ import annotations

from typing import Mapping

from selfknow.report.catalog import Table, needs

#: the parts every score job writes (one parquet each, rule ladder_score); the tables read them back
SCORE_PARTS = ("sessions", "bootstrap", "controls", "grid", "partitions", "tiers", "prefix",
               "heldout", "decoder", "simulators", "pairs", "answers", "reliability")
#: the score parts Figures 9 and 11 read (rule ladder_appendix)
APPENDIX_PARTS = ("sessions", "answers", "heldout", "controls")

_MAIN = needs("ladder")
_FIGURE = dict(figure=True, data_table=False)

TABLES: tuple[Table, ...] = (
    # `tables.write_all` (rule ladder_tables): the main table, analyses, Figures 4-7
    *(Table(n, _MAIN, job="tables") for n in ("main", "decoder", "noise_grid", "partitions", "r4", "controls",
                                               "tiers", "prefix", "heldout", "simulators", "pooled_pairs",
                                               "answers")),
    *(Table(f, _MAIN, job="tables", **_FIGURE) for f in ("figure4", "figure5", "figure6", "figure7")),
    Table("table34", _MAIN, job="heldout"),  # held-out ReAct (rule ladder_table34)
    # `appendix.write_appendix` (rule ladder_appendix): Tables 18 and 33, Figures 9 and 11
    *(Table(n, _MAIN, job="appendix") for n in ("table18", "table33", "table33_runs")),
    *(Table(f, _MAIN, job="appendix", **_FIGURE) for f in ("figure9", "figure11")),
    Table("table32", needs("ladder", "extension"), job="extension"),  # extension tasks (§F)
    # cross-task priors, one table per configured suite (Tables 14 and 15)
    Table("crosstask_mmlu_pro", needs("ladder", "crosstask_mmlu_pro"), job="crosstask"),
    Table("crosstask_bbh", needs("ladder", "crosstask_bbh"), job="crosstask"),
    # the importer of released sessions (`ladder_import_dir`; no "ladder" section needed)
    Table("import_aggregates", needs("import"), job="import"),
)


def config_has(config: Mapping) -> set[str]:
    """The `Table.needs` words a whole config meets."""
    have = set()
    if "ladder" in config:
        lad = config["ladder"]
        have.add("ladder")
        if "extension" in lad:
            have.add("extension")
        if "cross_task" in lad:
            have.update(f"crosstask_{s}" for s in lad["cross_task"]["suites"])
    if "ladder_import_dir" in config:
        have.add("import")
    return have
