"""The LCAE paper's catalog (the pattern of `selfknow.report.catalog`): its tables and
figure, each listed once. One job writes them all (`tables.write_tables`, rule lcae_tables)."""
from __future__ import annotations

from selfknow.report.catalog import Table

TABLES: tuple[Table, ...] = (
    Table("table1", job="tables"),          # Table I: LCAE (BCE) per condition
    Table("table1_squared", job="tables"),  # Table I with squared error (beyond the paper)
    Table("table2", job="tables"),          # Table II: Stage-3 ability per condition
    Table("table3", job="tables"),          # Table III: top examinees
    Table("item_fit", job="tables"),        # item fit (infit / outfit)
    Table("figure2", figure=True, data_table=False, job="tables"),  # ability x LCAE x cost efficiency
)
