"""Every catalog of the workflow (the three papers' and the shared stages'), and the report's
catalog derived from their entries (`selfknow.report.catalog.report_items`): what the
Snakefile flags for `snakemake --report` and the tests check the captions against."""
from __future__ import annotations

from selfknow.report.catalog import SHARED, Catalog, report_items

from selfknow.protocols.ladder.catalog import CATALOG as LADDER
from selfknow.protocols.lcae.catalog import CATALOG as LCAE
from selfknow.protocols.persistent.catalog import CATALOG as PERSISTENT

CATALOGS: tuple[Catalog, ...] = (PERSISTENT, LADDER, LCAE, *SHARED)
#: "<paper>/<name>" -> its report item (caption, category, subcategory, label, kind, output, output_key)
REPORT = report_items(CATALOGS)
