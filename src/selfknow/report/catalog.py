"""The pattern of the three papers' catalogs (`protocols/<paper>/catalog.py`): every table and
figure a paper's workflow can build is one `Table` entry, listed once, with what it needs of
the config. The rules derive their targets from it (`buildable`), each paper's table code
its rows and columns from the entry's `layout`, and a test checks the report catalog
(workflow_report/catalog.yaml) against it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence


@dataclass(frozen=True)
class Table:
    """One table (`tables/<paper>/<name>.csv`, .md, ...) or figure (`figures/<paper>/<name>.png`).

    `needs`: what the config must provide for it to exist (paper-specific words, e.g.
    "gcm", "transfer", "second_dataset"); `figure`: a PNG (with `data_table`, its data is
    written as a table of the same name beside the tables); `job`: the job (rule) that
    writes it with others ("" for a job of its own); `layout`: the paper's own description
    of its rows and columns (None where the job's code writes it whole)."""

    name: str
    needs: frozenset[str] = frozenset()
    figure: bool = False
    data_table: bool = True
    job: str = ""
    layout: Any = None

    @property
    def writes_table(self) -> bool:
        """Whether `tables/<paper>/<name>.*` is written (a table, or a figure's data table)."""
        return not self.figure or self.data_table


def needs(*words: str) -> frozenset[str]:
    return frozenset(words)


def buildable(tables: Sequence[Table], have: Iterable[str]) -> list[Table]:
    """The entries of `tables` whose needs the config meets (`have`), in catalog order."""
    have = set(have)
    return [t for t in tables if t.needs <= have]


def names(tables: Sequence[Table], *, job: str | None = None, figure: bool | None = None) -> tuple[str, ...]:
    """The names of the entries written by `job` (None: any) that are figures or not (None: both)."""
    return tuple(t.name for t in tables if (job is None or t.job == job) and (figure is None or t.figure == figure))


def by_name(tables: Sequence[Table]) -> dict[str, Table]:
    out: dict[str, Table] = {}
    for t in tables:
        if t.name in out:
            raise ValueError(f"table {t.name!r} is listed twice in the catalog")
        out[t.name] = t
    return out
