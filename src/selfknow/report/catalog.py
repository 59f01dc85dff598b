"""The pattern of the catalogs (`protocols/<paper>/catalog.py`, and `SHARED` below for the
tables of the shared stages): every table and figure the workflow can build is one `Table`
entry, listed once. The entry is the one declaration of a table: its builder, title, notes,
what it needs of the config, and its place in the report. The rules derive their targets from
it (`Catalog.built`; `all_tables` every catalog's `Catalog.targets`), each paper's table code
its rows, title and notes, the report its catalog
(`report_items`, read by rules/common.smk) and every caption its provenance block
(`caption_text`); a caption file (workflow_report/<paper>/<name>.rst) holds only the words
that describe the table, and the paragraphs many captions share are each one file of
workflow_report/shared/, appended where an entry names them (`Table.caption_tail`)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from selfknow.paths import FIGURE as FIGURE_PATH
from selfknow.paths import TABLE as TABLE_PATH
from selfknow.paths import fill


@dataclass(frozen=True)
class Table:
    """One table (`tables/<paper>/<name>.csv`, .md, ...) or figure (`figures/<paper>/<name>.png`).

    `builder`: the function that computes it, a lazy "module:function" reference (imported only
    by the job that builds the table; what it takes is the paper's convention, said in its
    catalog); `title`: its title, formatted with what the job knows (`model`, `dataset`, ...);
    `notes`: the notes every build of it carries (a builder adds those drawn from its numbers);
    `needs`: what the config must provide for it to exist (paper-specific words, e.g. "gcm",
    "transfer", "second_dataset"); `figure`: a PNG (with `data_table`, its data is written as a
    table of the same name beside the tables); `job`: the job (rule) that writes it with others
    ("" for a job of its own); `layout`: the paper's own description of its rows and columns
    (None where the builder writes it whole); `subcategory` and `label`: where the report shows
    it and under which name (the category is the paper's); `output`: the figure's path under
    `results` where it has wildcards (one figure per model and dataset); `caption_tail`: the
    shared caption paragraphs (workflow_report/shared/<name>.rst) that follow its caption's own
    words, in order (a table's caption then ends with `TABLE_FILES`)."""

    name: str
    builder: str = ""
    title: str = ""
    notes: str = ""
    needs: frozenset[str] = frozenset()
    figure: bool = False
    data_table: bool = True
    job: str = ""
    layout: Any = None
    subcategory: str = ""
    label: str = ""
    output: str = ""
    caption_tail: tuple[str, ...] = ()

    @property
    def writes_table(self) -> bool:
        """Whether `tables/<paper>/<name>.*` is written (a table, or a figure's data table)."""
        return not self.figure or self.data_table

    def build(self) -> Callable:
        """The builder function (imports its module). Inside a workflow job, the job's code
        fingerprint must reach it (`selfknow.code_inputs.check_reached`)."""
        from selfknow.code_inputs import check_reached

        check_reached(self.builder)
        return resolve(self.builder)


def _always(config: Mapping) -> bool:
    return True


def _nothing(config: Mapping) -> set[str]:
    return set()


def _no_wildcards(config: Mapping) -> list[dict[str, str]]:
    return [{}]


@dataclass(frozen=True)
class Catalog:
    """The tables of one `paper` (the directory of its tables, figures and captions) and the
    report category they are shown under, and what a whole config builds of them: nothing
    unless it `runs` the paper, then each entry whose `needs` are among the words `config_has`
    returns; `wildcards`: the values an entry's `output` template is filled with, one mapping
    per figure."""

    paper: str
    category: str
    tables: tuple[Table, ...]
    runs: Callable[[Mapping], bool] = _always
    config_has: Callable[[Mapping], set[str]] = _nothing
    wildcards: Callable[[Mapping], list[dict[str, str]]] = _no_wildcards

    def built(self, config: Mapping) -> list[Table]:
        """The entries `config` builds, in catalog order."""
        return buildable(self.tables, self.config_has(config)) if self.runs(config) else []

    def targets(self, config: Mapping) -> list[str]:
        """What `config` builds of this catalog, relative to `results`: each table's CSV and
        Markdown (a figure's data table's too) and each figure's PNG, one per `wildcards`
        mapping where its `output` has wildcards."""
        out = []
        for t in self.built(config):
            if t.writes_table:
                out += [fill(TABLE_PATH, paper=self.paper, name=t.name, ext=ext) for ext in ("csv", "md")]
            if t.figure:
                out += [fill(report_output(self.paper, t), **w) for w in (self.wildcards(config) if t.output else [{}])]
        return out


def resolve(ref: str) -> Callable:
    """The function a "module:function" reference names."""
    module, sep, name = ref.partition(":")
    if not sep or not name:
        raise ValueError(f"{ref!r} is not a 'module:function' reference")
    return getattr(importlib.import_module(module), name)


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


def _world(config: Mapping) -> bool:
    return "world" in config


def _llm_judge(config: Mapping) -> bool:
    return "llm_judge" in config["judge"]


def _any_protocol(config: Mapping) -> bool:
    return any(k in config for k in ("lcae", "ladder", "persistent"))


#: the tables of the shared stages and of the self-knowledge card, beside the papers' catalogs,
#: each written by its job through the one driver (`selfknow.report.jobs.write_catalog`): the
#: world's (a config with a generated world), the judge audit (one with an LLM judge) and the
#: card (one that runs any paper's protocol)
WORLD_CATALOG = Catalog("world", "Shared stages", (
    Table("evolution", "selfknow.report.jobs:evolution",
          "World knowledge across checkpoints: contrast sets of evaluation-checkpoint pairs against the curriculum",
          subcategory="World and judge", label="World knowledge across checkpoints"),), _world)
JUDGE_CATALOG = Catalog("judge", "Shared stages", (
    Table("audit", "selfknow.report.jobs:judge_audit", "Judge audit: exact match vs the LLM judge",
          subcategory="World and judge", label="Judge audit"),), _llm_judge)
CARD_CATALOG = Catalog("card", "Self-knowledge card", (
    Table("self_knowledge", "selfknow.report.card:card_table",
          "Self-knowledge card: what the three protocols say about each model (95 % intervals)",
          "Ability: Rasch θ ± 1.96 SE (LCAE Stage 1, Standard prompting, last checkpoint). LCAE: mean over "
          "repeats, t-interval (none when the repeats agree: local models decode deterministically at "
          "temperature 0, the paper's setting). A value without an interval has none: a single point is not "
          "printed as one. CBF: LADDER session mean, session-bootstrap interval. Persistent: self-consistency, "
          "paired-bootstrap percentile interval. Empty: the config does not run that protocol for the model; "
          "`not run` names those protocols (a model in the registry only to serve, e.g. as judge, user or "
          "prompted model, has every protocol there).",
          subcategory="Self-knowledge card", label="Self-knowledge card"),), _any_protocol)
SHARED: tuple[Catalog, ...] = (WORLD_CATALOG, JUDGE_CATALOG, CARD_CATALOG)


# ----------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------
def report_output(paper: str, t: Table) -> str:
    """Where the report finds the entry, under `results`: a table's HTML page, a figure's PNG."""
    if t.output:
        return t.output
    return fill(FIGURE_PATH, paper=paper, name=t.name) if t.figure else fill(TABLE_PATH, paper=paper, name=t.name,
                                                                              ext="html")


def output_key(t: Table) -> str:
    """The name of the rule's output the report shows: "<figure>", or "<table>_html"."""
    return t.name if t.figure else f"{t.name}_html"


#: the directory under workflow_report/ of the caption paragraphs many entries share
SHARED_CAPTIONS = "shared"
#: the paragraph that ends every table's caption (a figure's data table is not shown)
TABLE_FILES = "table_files"


def caption_tail(t: Table) -> list[str]:
    """The shared caption files that follow the entry's own caption: its `caption_tail`, then,
    for a table, `TABLE_FILES`."""
    return [f"{SHARED_CAPTIONS}/{n}.rst" for n in (*t.caption_tail, *(() if t.figure else (TABLE_FILES,)))]


def report_items(catalogs: Iterable[Catalog]) -> dict[str, dict[str, Any]]:
    """"<paper>/<name>" -> its report item (caption file, the shared caption files that follow
    it, category, subcategory, label, kind, output, output key) for every entry of `catalogs`."""
    out = {}
    for c in catalogs:
        for t in c.tables:
            if not (t.subcategory and t.label):
                raise ValueError(f"catalog entry {c.paper}/{t.name} names no report subcategory or label")
            out[f"{c.paper}/{t.name}"] = {
                "caption": f"{c.paper}/{t.name}.rst", "caption_tail": caption_tail(t), "category": c.category,
                "subcategory": t.subcategory, "label": t.label, "kind": "figure" if t.figure else "table",
                "output": report_output(c.paper, t),
                "output_key": output_key(t)}
    return out


#: every caption's last paragraph: the provenance sidecar of the table (`<table>_csv`) or figure,
#: shown up to the config fragment it records
PROVENANCE = """
Provenance: the sidecar ``{{{{ snakemake.output.{key}[:-4] }}}}.json`` records the config hash, git
commit, model revisions, the sha256 of every input (item sample and upstream records) and package versions
(the config fragment itself follows in the file):

.. include:: {{{{ snakemake.output.{key}[:-4] }}}}.json
   :literal:
   :end-before: "config":
"""


def caption_text(item: Mapping[str, Any], report_dir: str | Path) -> str:
    """The full caption of a report item (`report_items`): its caption file's words, the
    shared paragraphs that follow them, then the provenance block, read from the sidecar next
    to the output its rule names."""
    text = "\n\n".join((Path(report_dir) / f).read_text(encoding="utf-8").rstrip("\n")
                       for f in (item["caption"], *item["caption_tail"]))
    key = item["output_key"] if item["kind"] == "figure" else item["output_key"].removesuffix("_html") + "_csv"
    return text + "\n" + PROVENANCE.format(key=key)


def call_by_name(fn: Callable, known: Mapping[str, Any]) -> Any:
    """`fn` called with the values of `known` its parameters name (a builder's convention: it
    takes what it needs by name), or with all of them where it takes any keyword (`**kw`)."""
    import inspect

    params = inspect.signature(fn).parameters
    missing = [p for p, s in params.items() if p not in known and s.default is inspect.Parameter.empty
               and s.kind not in (s.VAR_POSITIONAL, s.VAR_KEYWORD)]
    if missing:
        raise TypeError(f"{fn.__module__}.{fn.__name__} needs {missing}, which its job does not provide "
                        f"(it provides {sorted(known)})")
    if any(s.kind is s.VAR_KEYWORD for s in params.values()):
        return fn(**known)
    return fn(**{p: known[p] for p in params if p in known})

