"""The LCAE paper's catalog (the pattern of `selfknow.report.catalog`): its tables and
figure, each listed once with its builder, title and place in the report. One job writes them
all (`tables.write_tables`, rule lcae_tables, and `selfknow lcae-eval`) through the one driver
(`selfknow.report.tables.write_entries`): a builder takes what it needs by name (`stage3`,
`items`, `shared_repeats`, `modes_note`, `fit_notes`, the figure's `prices`) and returns a
`Built`, its table (the figure's points) and the paragraphs of its notes drawn from it."""
from __future__ import annotations

from typing import Mapping

from selfknow.report.catalog import Catalog, Table, by_name

CATEGORY = "Paper 3: Latent Confidence Alignment"
_GROUP = "Tables I-III, item fit, Figure 2"
#: the shared caption paragraph (workflow_report/shared/) of the examinees and their conditions
_EXAMINEES = ("lcae_examinees",)

TABLES: tuple[Table, ...] = (
    Table("table1", "selfknow.protocols.lcae.tables:table1",
          "Table I: LCAE (BCE) per condition, mean over repeats, with its reference points",
          job="tables", subcategory=_GROUP, label="Table I: LCAE per condition", caption_tail=_EXAMINEES),
    Table("table1_squared", "selfknow.protocols.lcae.tables:table1_squared",
          "Table I, squared-error variant (beyond the paper): mean "
          "(e − ĉ)² per condition, mean over repeats", job="tables", subcategory=_GROUP,
          label="Table I, squared-error LCAE (beyond the paper)", caption_tail=_EXAMINEES),
    Table("table2", "selfknow.protocols.lcae.tables:table2",
          "Table II: ability θ re-estimated from final answers (Stage 3), per condition",
          job="tables", subcategory=_GROUP, label="Table II: ability per condition", caption_tail=_EXAMINEES),
    Table("table3", "selfknow.protocols.lcae.tables:table3",
          "Table III: top examinees by ability, mean LCAE [95 % CI over repeats, where they differ]",
          "Ranked by the mean Stage-3 ability over every condition and repeat; columns in the paper's order.",
          job="tables", subcategory=_GROUP, label="Table III: top examinees", caption_tail=_EXAMINEES),
    Table("item_fit", "selfknow.protocols.lcae.tables:item_fit",
          "Item fit: infit / outfit MNSQ (acceptable 0.5-1.5, severe > 2.0)",
          job="tables", subcategory=_GROUP, label="Item fit (infit / outfit)", caption_tail=_EXAMINEES),
    Table("findings", "selfknow.protocols.lcae.tables:findings",
          "What the default finds (LCAE): each condition against the constant 0.5 and against Baseline",
          job="tables", subcategory="What the default finds", label="What the default finds: LCAE"),
    Table("figure2", "selfknow.protocols.lcae.tables:figure2",
          "Stage-3 ability x LCAE x cost efficiency (IDS+DPR, means over repeats)", figure=True, data_table=False,
          job="tables", subcategory=_GROUP, label="Figure 2: ability x LCAE x CE"),
)
TABLE = by_name(TABLES)


def runs(config: Mapping) -> bool:
    """Whether a whole config runs the protocol (every entry is then built)."""
    return "lcae" in config


CATALOG = Catalog("lcae", CATEGORY, TABLES, runs)
