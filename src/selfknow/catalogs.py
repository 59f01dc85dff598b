"""Every catalog of the workflow (the three papers' and the shared stages'), the tables and
figures a config builds of them (`table_files`, the targets of `all_tables`), and the report's
catalog derived from their entries (`selfknow.report.catalog.report_items`): what the
Snakefile flags for `snakemake --report` and the tests check the captions against."""
from __future__ import annotations

from typing import Mapping

from selfknow.report.catalog import SHARED, Catalog, report_items

from selfknow.protocols.ladder.catalog import CATALOG as LADDER
from selfknow.protocols.lcae.catalog import CATALOG as LCAE
from selfknow.protocols.persistent.catalog import CATALOG as PERSISTENT

CATALOGS: tuple[Catalog, ...] = (PERSISTENT, LADDER, LCAE, *SHARED)
#: "<paper>/<name>" -> its report item (caption, category, subcategory, label, kind, output, output_key)
REPORT = report_items(CATALOGS)


def table_files(config: Mapping) -> list[str]:
    """Every table (CSV, Markdown) and figure (PNG) of every catalog that `config` builds,
    relative to its `results` (`Catalog.targets`)."""
    return [f for c in CATALOGS for f in c.targets(config)]
