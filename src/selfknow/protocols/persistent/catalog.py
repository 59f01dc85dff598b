"""The persistent paper's catalog: every confidence method and every table and figure, each
listed once. Read by `metrics.assemble_methods` (which methods to compute), `tables`
(rows, columns, titles), `jobs.reliability_job` (panels), the rules
(rules/persistent_common.smk: which tables this config builds, which evaluation each reads)
and the tests (tests/test_catalog.py checks the report catalog and the rules against it).
docs/extending.md walks through adding a method and a table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from selfknow.report.catalog import Table, by_name, needs

from . import methods as M
from .methods import MethodInputs
from .variants import MAIN, TRANSFER


@dataclass(frozen=True)
class Method:
    """One confidence method: its `name` in the metric files, its row `label` in the tables
    (a table may relabel it), and where its confidences come from:

    - model-free: `confidences(MethodInputs)` -> (n_seeds, n_eval, n), computed by
      `metrics.assemble_methods` on every evaluation set that has its `inputs` (fields of
      `MethodInputs` that may be absent: "train_sc", "surrogate_sc");
    - needs a model: `job`, the job whose confidence table it reads: a training variant
      (`variants.VARIANTS`, run by `jobs.variant_job`) or a GCM ("gcm": `jobs.released_gcm_job`,
      "gcm_trained": `jobs.gcm_job`), and its `role` there: "own" (each checkpoint's
      adapter on its own answers), "surrogate"/"copy" (§3.2) or "posthoc" (isotonic map fitted
      on the training checkpoints' train answers).

    `panel`: its reliability diagram's title (`jobs.reliability_job`), None for no panel."""

    name: str
    label: str
    confidences: Callable[[MethodInputs], np.ndarray] | None = None
    inputs: tuple[str, ...] = ()
    job: str | None = None
    role: str = "own"
    panel: str | None = None

    @property
    def needs_model(self) -> bool:
        return self.confidences is None


METHODS: tuple[Method, ...] = (
    Method("end_correct", "End-correct baseline", M.end_correct, panel="End-correct baseline"),
    Method("sc", "Self-consistency", M.self_consistency, panel="Self-consistency"),
    Method("sc_posthoc", "⌞ Post-hoc", M.sc_posthoc, inputs=("train_sc",), panel="SC post-hoc"),
    Method("sc_surrogate", "⌞ Surrogate", M.sc_surrogate, inputs=("surrogate_sc",), panel="SC surrogate"),
    Method("sc_copy", "⌞ Copy", M.sc_copy, inputs=("surrogate_sc",), panel="SC copy"),
    Method("nonoracle", "Non-oracle training", job="nonoracle_multi", panel="Non-oracle training"),
    Method("nonoracle_surrogate", "⌞ Surrogate", job="nonoracle_multi", role="surrogate", panel="Non-oracle surrogate"),
    Method("nonoracle_copy", "⌞ Copy", job="nonoracle_multi", role="copy", panel="Non-oracle copy"),
    Method("nonoracle_multi_n1", "Non-oracle multi-ckpt, n_cand=1", job="nonoracle_multi_n1"),
    Method("nonoracle_single", "Non-oracle single-ckpt", job="nonoracle_single"),
    Method("nonoracle_single_n1", "Non-oracle single-ckpt, n_cand=1", job="nonoracle_single_n1"),
    Method("oracle", "Oracle training", job="oracle_multi", panel="Oracle training"),
    Method("oracle_multi_n1", "Oracle multi-ckpt, n_cand=1", job="oracle_multi_n1"),
    Method("oracle_respective", "Oracle respective-ckpt", job="oracle_respective"),
    Method("oracle_respective_n1", "Oracle respective-ckpt, n_cand=1", job="oracle_respective_n1"),
    Method("oracle_single_data", "Oracle multi-ckpt, single-ckpt data", job="oracle_single_data"),
    Method("oracle_pooled", "Oracle respective-ckpt, pooled data", job="oracle_pooled"),
    Method("gcm", "GCM", job="gcm", panel="GCM"),
    Method("gcm_posthoc", "⌞ Post-hoc", job="gcm", role="posthoc", panel="GCM post-hoc"),
    Method("gcm_trained", "GCM (trained here)", job="gcm_trained", panel="GCM (trained here)"),
    Method("gcm_trained_posthoc", "⌞ Post-hoc", job="gcm_trained", role="posthoc",
           panel="GCM (trained here) post-hoc"),
)
METHOD = {m.name: m for m in METHODS}
if len(METHOD) != len(METHODS):
    raise ValueError("a persistent method is listed twice in the catalog")
#: the jobs of the two GCMs: the released adapter (the paper's) or our own trained one
GCM_JOBS = ("gcm", "gcm_trained")
#: their methods
GCM_METHODS = tuple(m.name for m in METHODS if m.job in GCM_JOBS and m.role == "own")


def trained_method(job: str, role: str = "own") -> str:
    """The name of the method that reads `job`'s confidences in `role`."""
    for m in METHODS:
        if m.job == job and m.role == role:
            return m.name
    raise KeyError(f"the persistent catalog lists no method for the {role!r} confidences of job {job!r} "
                   "(protocols/persistent/catalog.py METHODS)")


# ----------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """Rows compared with each other (a mark group, §A.8), for each (model, dataset) of the
    table. A row: a method name, or (method name, the label this table gives it); "{gcm}"
    stands for the GCM the config runs (`GCM_METHODS`). `labels`: leading label columns of
    its rows (e.g. {"setting": "Oracle"})."""

    rows: tuple
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MethodTable:
    """A method-comparison table: `blocks` of rows for each model (`models`: "first" or
    "each") and training dataset (`datasets`: "first", "second" or "each"), on the
    evaluation set `evalset` (`MAIN`: the dataset's test split; `TRANSFER`); rows run model,
    dataset, block (`block_major`: block, model, dataset). Label columns: the block's, then
    `label_columns` (of "model", "dataset", "transfer"), then "method". `columns`: "wide" (the
    three short metrics per model, Tables 1-3) or "full" (the ten metrics). `normaliser`: "eq1"
    or "bt" (the fitted §B.1 normalisation: `metrics.compute_metrics` computes it for the rows
    of such tables). `title` is formatted with model, dataset and transfer; `oracle_check`
    adds `tables.oracle_check`'s note."""

    title: str
    blocks: tuple[Block, ...]
    columns: str = "full"
    models: str = "each"
    datasets: str = "each"
    label_columns: tuple[str, ...] = ("model", "dataset")
    evalset: str = MAIN
    normaliser: str = "eq1"
    block_major: bool = False
    oracle_check: bool = False


@dataclass(frozen=True)
class ContrastTable:
    """Tables 8-10: contrast-set sizes of one training dataset ("first" or "second") on one
    evaluation set."""

    dataset: str
    evalset: str = MAIN


@dataclass(frozen=True)
class TransferFigure:
    """Figures 3 and 4: the transfer and random-label matrices of the first model on one
    training dataset (0: the first, 1: the second)."""

    dataset: int


MAIN_ROWS = ("end_correct", "sc", "sc_posthoc", "nonoracle", "oracle")
SURROGATE_BLOCKS = (Block(("sc", "sc_surrogate", "sc_copy")), Block(("nonoracle", "nonoracle_surrogate", "nonoracle_copy")))
ABLATION_4 = Block((("oracle", "Multi-ckpt"), ("oracle_single_data", "⌞ Single-ckpt data"),
                    ("oracle_respective", "Resp-ckpt"), ("oracle_pooled", "⌞ Pooled data")))
NCAND = (Block((("nonoracle", "Multi-ckpt, n_cand=2"), ("nonoracle_multi_n1", "Multi-ckpt, n_cand=1"),
                ("nonoracle_single", "Single-ckpt, n_cand=2"), ("nonoracle_single_n1", "Single-ckpt, n_cand=1")),
               {"setting": "Non-oracle"}),
         Block((("oracle", "Multi-ckpt, n_cand=2"), ("oracle_multi_n1", "Multi-ckpt, n_cand=1"),
                ("oracle_respective", "Resp-ckpt, n_cand=2"), ("oracle_respective_n1", "Resp-ckpt, n_cand=1")),
               {"setting": "Oracle"}))

#: what a table can need of the config: a second training dataset, the transfer dataset, a GCM
SECOND, TRANSFER_SET, GCM = "second_dataset", "transfer", "gcm"

TABLES: tuple[Table, ...] = (
    Table("table1", layout=MethodTable(
        "Table 1: contrast-set and full-set calibration of SC and non-oracle vs oracle training",
        (Block(("end_correct", "sc", "nonoracle", "oracle")),), columns="wide", models="first",
        label_columns=("dataset",), oracle_check=True)),
    Table("table2", layout=MethodTable(
        "Table 2: surrogate and copy ablations ({dataset})", SURROGATE_BLOCKS, columns="wide", models="first",
        datasets="first", label_columns=("dataset",))),
    Table("table3", layout=MethodTable(
        "Table 3: multi- vs single/respective-checkpoint training ({dataset})",
        (Block((("nonoracle", "Multi-ckpt"), ("nonoracle_single", "Single-ckpt")), {"setting": "Non-oracle"}),
         Block((("oracle", "Multi-ckpt"), ("oracle_respective", "Respective-ckpt")), {"setting": "Oracle"})),
        columns="wide", models="first", datasets="first", label_columns=())),
    Table("table4", layout=MethodTable(
        "Table 4: ablations of multi-checkpoint training gains (oracle; {model}, {dataset})", (ABLATION_4,),
        models="first", datasets="first")),
    Table("table8", layout=ContrastTable("first")),
    Table("table9", needs(SECOND), layout=ContrastTable("second")),
    Table("table10", needs(TRANSFER_SET), layout=ContrastTable("first", TRANSFER)),
    Table("table11", layout=MethodTable("Table 11: all ten metrics (Eq. 1 normalisation)", (Block(MAIN_ROWS),))),
    Table("table12", layout=MethodTable(
        "Table 12: all ten metrics with the fitted Bradley-Terry normalisation (§B.1)", (Block(MAIN_ROWS),),
        normaliser="bt")),
    Table("table13", layout=MethodTable("Table 13: surrogate and copy ablations, all metrics", SURROGATE_BLOCKS)),
    Table("table14", layout=MethodTable(
        "Table 14: multi-checkpoint and multi-answer training ({dataset})", NCAND, datasets="first",
        label_columns=("model",), block_major=True)),
    Table("table15", needs(SECOND), layout=MethodTable(
        "Table 15: multi-checkpoint and multi-answer training ({dataset})", NCAND, datasets="second",
        label_columns=("model",), block_major=True)),
    Table("table16", needs(SECOND), layout=MethodTable(
        "Table 16: ablations of multi-checkpoint training gains (oracle; {model}, {dataset})", (ABLATION_4,),
        models="first", datasets="second")),
    Table("table17", needs(GCM), layout=MethodTable(
        "Table 17: GCM vs oracle training", (Block(("{gcm}", "{gcm}_posthoc", "oracle")),))),
    Table("table18", needs(TRANSFER_SET), layout=MethodTable(
        "Table 18: domain transfer to {transfer}", (Block(("sc", "nonoracle", "oracle")),),
        label_columns=("model", "transfer"), evalset=TRANSFER)),
    Table("table7"),  # top-answer accuracy per checkpoint (`tables.table7_job`)
    Table("table19"),  # hidden-state variance across adapter seeds (`tables.table19_job`)
    Table("figure2", needs(GCM), figure=True),  # GCM headroom (`tables.figure2_job`)
    Table("figure3", figure=True, layout=TransferFigure(0)),
    Table("figure4", needs(SECOND), figure=True, layout=TransferFigure(1)),
    # one per (model, training dataset), beyond the paper (`jobs.reliability_job`)
    Table("reliability", figure=True, data_table=False),
)
TABLE = by_name(TABLES)


def config_has(n_datasets: int, transfer: bool, gcm: bool) -> set[str]:
    """The `Table.needs` words a persistent config meets."""
    return {w for w, ok in ((SECOND, n_datasets > 1), (TRANSFER_SET, transfer), (GCM, gcm)) if ok}


def table_evalset(name: str) -> str:
    """The evaluation set a method or contrast table reads."""
    return TABLE[name].layout.evalset


def fitted_methods() -> tuple[str, ...]:
    """The methods whose metrics are also computed with the fitted §B.1 normalisation: the
    rows of the tables that show it (Table 12)."""
    out = [row_method(r) for t in TABLES if isinstance(t.layout, MethodTable) and t.layout.normaliser == "bt"
           for b in t.layout.blocks for r in b.rows]
    return tuple(dict.fromkeys(out))


def row_method(row) -> str:
    return row if isinstance(row, str) else row[0]


def row_label(row, gcm: str | None = None) -> tuple[str, str]:
    """(method, label) of a row spec, "{gcm}" resolved to `gcm`."""
    name, label = (row, None) if isinstance(row, str) else row
    if "{gcm}" in name:
        if gcm is None:
            raise ValueError(f"row {name!r} needs the config's GCM")
        name = name.format(gcm=gcm)
    return name, label if label is not None else METHOD[name].label


def reliability_panels() -> dict[str, str]:
    """Method -> its reliability panel title, in panel order."""
    return {m.name: m.panel for m in METHODS if m.panel}


def reliability_variants() -> tuple[str, ...]:
    """The training variants whose methods the reliability diagrams show."""
    return tuple(dict.fromkeys(m.job for m in METHODS if m.panel and m.job and m.job not in GCM_JOBS))
