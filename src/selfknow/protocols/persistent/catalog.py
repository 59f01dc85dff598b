"""The persistent paper's catalog: every confidence method and every table and figure, each
listed once (a table's entry: `selfknow.report.catalog.Table`). Read by
`metrics.assemble_methods` (which methods to compute), `tables` (rows, columns, titles),
`jobs.reliability_job` (panels), the report (category, labels), the rules
(rules/persistent_common.smk: which tables this config builds, which evaluation each reads)
and the tests (tests/test_catalog.py checks the report catalog and the rules against it).
docs/extending.md walks through adding a method and a table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from selfknow.report.catalog import Catalog, Table, by_name, needs

from .variants import MAIN, TRANSFER


@dataclass(frozen=True)
class Method:
    """One confidence method: its `name` in the metric files, its row `label` in the tables
    (a table may relabel it), and where its confidences come from:

    - model-free: `confidences`, a lazy "module:function" reference to a function of
      `methods.MethodInputs` -> (n_seeds, n_eval, n), computed by
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
    confidences: str | None = None
    inputs: tuple[str, ...] = ()
    job: str | None = None
    role: str = "own"
    panel: str | None = None

    @property
    def needs_model(self) -> bool:
        return self.confidences is None


METHODS: tuple[Method, ...] = (
    # written whole: the jobs call them through this catalog, and their code fingerprint
    # (selfknow.code_inputs) reaches a function by such a reference
    Method("end_correct", "End-correct baseline", "selfknow.protocols.persistent.methods:end_correct",
           panel="End-correct baseline"),
    Method("sc", "Self-consistency", "selfknow.protocols.persistent.methods:self_consistency",
           panel="Self-consistency"),
    Method("sc_posthoc", "⌞ Post-hoc", "selfknow.protocols.persistent.methods:sc_posthoc", inputs=("train_sc",),
           panel="SC post-hoc"),
    Method("sc_surrogate", "⌞ Surrogate", "selfknow.protocols.persistent.methods:sc_surrogate",
           inputs=("surrogate_sc",), panel="SC surrogate"),
    Method("sc_copy", "⌞ Copy", "selfknow.protocols.persistent.methods:sc_copy", inputs=("surrogate_sc",),
           panel="SC copy"),
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
    of such tables). The entry's title is formatted with model, dataset and transfer;
    `oracle_check` adds `tables.oracle_check`'s note."""

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
class FindingsTable:
    """What the default finds: the paper's headline comparisons on contrast-set AUC, each model
    and training dataset, from the paired bootstrap replicates of `evalset`'s metric files
    (`findings.findings_table`)."""

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

#: the report's category for this paper, and its subcategories
CATEGORY = "Paper 1: Persistent calibration"
MAIN_TEXT, APPENDIX = "Main text (Tables 1-4, Figures 2-3)", "Appendix (Tables 7, 11-19, Figure 4)"
CONTRAST = "Contrast-set sizes (Tables 8-10)"
FINDINGS = "What the default finds"
#: the shared caption paragraphs (workflow_report/shared/): the §A.8 marks, the models and datasets
MARKS, MODELS = "persistent_marks", "persistent_models"
#: A builder is a function of `tables` that returns a `selfknow.report.tables.Built`; the job of
#: its rule (rules/persistent.smk, a function of `rule_jobs`) gathers the files and settings it
#: names and writes it through the one driver (`tables.write_entry`); the reliability diagrams'
#: builder is their rule's job. The references are assembled from their module, not written
#: whole: the metrics job and the table code read this catalog for layouts and titles and must
#: not reach, in their code fingerprints (selfknow.code_inputs), every table's builder. A title
#: is formatted with what the job knows: model, dataset, ...
_P = "selfknow.protocols.persistent."
METHOD_TABLE, CONTRAST_TABLE = _P + "tables:method_table", _P + "tables:contrast_table"
CONTRAST_TITLE = "Table {n}: {{dataset}} contrast-set sizes per pair of evaluation checkpoints"


def method_entry(name: str, title: str, layout: MethodTable, subcategory: str, label: str,
                 needs_: frozenset[str] = frozenset()) -> Table:
    """A method-comparison table, built by `tables.method_table`."""
    return Table(name, METHOD_TABLE, title, needs=needs_, layout=layout, subcategory=subcategory, label=label,
                 caption_tail=(MARKS, MODELS))


def contrast_entry(name: str, layout: ContrastTable, label: str, needs_: frozenset[str] = frozenset()) -> Table:
    """Tables 8-10, built by `tables.contrast_table`."""
    return Table(name, CONTRAST_TABLE, CONTRAST_TITLE.format(n=name[5:]), needs=needs_, layout=layout,
                 subcategory=CONTRAST, label=label, caption_tail=(MODELS,))


TABLES: tuple[Table, ...] = (
    method_entry("table1", "Table 1: contrast-set and full-set calibration of SC and non-oracle vs oracle training",
            MethodTable((Block(("end_correct", "sc", "nonoracle", "oracle")),), columns="wide", models="first",
                        label_columns=("dataset",), oracle_check=True),
            MAIN_TEXT, "Table 1: contrast Δ0b, contrast AUC, full AUC"),
    method_entry("table2", "Table 2: surrogate and copy ablations ({dataset})",
            MethodTable(SURROGATE_BLOCKS, columns="wide", models="first", datasets="first", label_columns=("dataset",)),
            MAIN_TEXT, "Table 2: surrogate and copy ablations"),
    method_entry("table3", "Table 3: multi- vs single/respective-checkpoint training ({dataset})",
            MethodTable((Block((("nonoracle", "Multi-ckpt"), ("nonoracle_single", "Single-ckpt")), {"setting": "Non-oracle"}),
                         Block((("oracle", "Multi-ckpt"), ("oracle_respective", "Respective-ckpt")), {"setting": "Oracle"})),
                        columns="wide", models="first", datasets="first", label_columns=()),
            MAIN_TEXT, "Table 3: multi- vs single/respective-checkpoint training"),
    method_entry("table4", "Table 4: ablations of multi-checkpoint training gains (oracle; {model}, {dataset})",
            MethodTable((ABLATION_4,), models="first", datasets="first"),
            MAIN_TEXT, "Table 4: ablations of multi-checkpoint gains"),
    contrast_entry("table8", ContrastTable("first"), "Table 8: contrast-set sizes, first dataset"),
    contrast_entry("table9", ContrastTable("second"), "Table 9: contrast-set sizes, second dataset", needs(SECOND)),
    contrast_entry("table10", ContrastTable("first", TRANSFER), "Table 10: contrast-set sizes, transfer dataset",
              needs(TRANSFER_SET)),
    method_entry("table11", "Table 11: all ten metrics (Eq. 1 normalisation)", MethodTable((Block(MAIN_ROWS),)),
            APPENDIX, "Table 11: all ten metrics"),
    method_entry("table12", "Table 12: all ten metrics with the fitted Bradley-Terry normalisation (§B.1)",
            MethodTable((Block(MAIN_ROWS),), normaliser="bt"), APPENDIX, "Table 12: fitted Bradley-Terry normalisation"),
    method_entry("table13", "Table 13: surrogate and copy ablations, all metrics", MethodTable(SURROGATE_BLOCKS),
            APPENDIX, "Table 13: surrogate/copy ablations, all metrics"),
    method_entry("table14", "Table 14: multi-checkpoint and multi-answer training ({dataset})",
            MethodTable(NCAND, datasets="first", label_columns=("model",), block_major=True),
            APPENDIX, "Table 14: multi-checkpoint and multi-answer training"),
    method_entry("table15", "Table 15: multi-checkpoint and multi-answer training ({dataset})",
            MethodTable(NCAND, datasets="second", label_columns=("model",), block_major=True),
            APPENDIX, "Table 15: multi-checkpoint and multi-answer training, second dataset", needs(SECOND)),
    method_entry("table16", "Table 16: ablations of multi-checkpoint training gains (oracle; {model}, {dataset})",
            MethodTable((ABLATION_4,), models="first", datasets="second"),
            APPENDIX, "Table 16: ablations of multi-checkpoint gains, second dataset", needs(SECOND)),
    method_entry("table17", "Table 17: GCM vs oracle training", MethodTable((Block(("{gcm}", "{gcm}_posthoc", "oracle")),)),
            APPENDIX, "Table 17: GCM vs oracle training", needs(GCM)),
    method_entry("table18", "Table 18: domain transfer to {transfer}",
            MethodTable((Block(("sc", "nonoracle", "oracle")),), label_columns=("model", "transfer"), evalset=TRANSFER),
            APPENDIX, "Table 18: domain transfer", needs(TRANSFER_SET)),
    Table("findings", _P + "tables:findings", "What the default finds (persistent calibration): the paper's headline "
          "comparisons on contrast-set AUC", layout=FindingsTable(), subcategory=FINDINGS,
          label="What the default finds: persistent calibration", caption_tail=(MODELS,)),
    Table("table7", _P + "tables:table7", "Table 7: top-answer accuracy (%) per checkpoint",
          subcategory=APPENDIX, label="Table 7: accuracy per checkpoint", caption_tail=(MODELS,)),
    Table("table19", _P + "tables:table19", "Table 19: Spearman ρ of checkpoint index with adapter hidden-state variance "
          "across seeds ({model}, {dataset})", subcategory=APPENDIX, label="Table 19: adapter variance vs checkpoint index",
          caption_tail=(MODELS,)),
    Table("figure2", _P + "tables:figure2", "Figure 2: GCM headroom on contrast-set AUC against oracle training",
          needs=needs(GCM), figure=True, subcategory=MAIN_TEXT, label="Figure 2: GCM headroom vs backbone error rate"),
    Table("figure3", _P + "tables:transfer_figure", "Figure 3: transfer between checkpoints ({model}, {dataset})",
          figure=True, layout=TransferFigure(0), subcategory=MAIN_TEXT, label="Figure 3: transfer between checkpoints",
          caption_tail=(MODELS,)),
    Table("figure4", _P + "tables:transfer_figure", "Figure 4: transfer between checkpoints ({model}, {dataset})",
          needs=needs(SECOND), figure=True, layout=TransferFigure(1), subcategory=APPENDIX,
          label="Figure 4: transfer between checkpoints, second dataset"),
    # one per (model, training dataset), beyond the paper
    Table("reliability", _P + "rule_jobs:reliability",
          "Reliability: {model} on {dataset} (evaluation checkpoints pooled, training seed {seed})",
          figure=True, data_table=False, subcategory="Reliability diagrams", label="Reliability {model} {dataset}",
          output="figures/persistent/reliability/{model}/{dataset}.png", caption_tail=(MODELS,)),
)
TABLE = by_name(TABLES)


def runs(config: Mapping) -> bool:
    """Whether a whole config runs the protocol: it names persistent models."""
    return "persistent" in config and bool(config["persistent"]["models"])


def config_has(config: Mapping) -> set[str]:
    """The `Table.needs` words a config that `runs` the protocol meets."""
    pc = config["persistent"]
    return {w for w, ok in ((SECOND, len(pc["datasets"]) > 1), (TRANSFER_SET, "transfer_dataset" in pc),
                            (GCM, "gcm_model" in pc)) if ok}


def per_model_dataset(config: Mapping) -> list[dict[str, str]]:
    """The reliability diagrams' wildcards: every persistent model on every training dataset."""
    pc = config["persistent"]
    return [{"model": m, "dataset": d} for m in pc["models"] for d in pc["datasets"]]


CATALOG = Catalog("persistent", CATEGORY, TABLES, runs, config_has, per_model_dataset)


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
