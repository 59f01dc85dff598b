"""The LADDER paper's catalog (the pattern of `selfknow.report.catalog`): every table and
figure, each listed once, with its builder, title, notes, the job that writes it, what it
needs of the config (`config_has`) and its place in the report, and the score parts the jobs
pass between them. The Snakefile reads this module
when it is parsed (twice per job on a cluster), so it imports nothing heavy."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from selfknow.report.catalog import Catalog, Table, by_name, needs

#: the parts every score job writes (one parquet each, rule ladder_score); the tables read them back
SCORE_PARTS = ("sessions", "bootstrap", "controls", "grid", "partitions", "tiers", "prefix",
               "heldout", "decoder", "simulators", "pairs", "answers", "reliability")
#: the score parts Figures 9 and 11 read (rule ladder_appendix)
APPENDIX_PARTS = ("sessions", "answers", "heldout", "controls")

_MAIN = needs("ladder")
CATEGORY = "Paper 2: LADDER"
MAIN_RESULTS, ANALYSES = "Main results (table, Figures 4-7)", "Analyses"
FINDINGS = "What the default finds"
#: the shared caption paragraph (workflow_report/shared/) of the main protocol's models and sessions
MODELS = ("ladder_models",)
APPENDIX, CROSSTASK = "Appendix analyses (Tables 18, 33; Figures 9, 11)", "Cross-task priors (Tables 14-15)"
#: Every builder returns a `selfknow.report.tables.Built` and is called by its job through
#: `selfknow.report.tables.write_entries`. The entries are grouped by the job that writes them,
#: each job reading its own group only: a builder's reference is written whole, so that the code
#: fingerprint of its job reaches it (selfknow.code_inputs) and no other job's does.


def _job(job: str, *entries: Table) -> tuple[Table, ...]:
    """`entries`, each written by `job` (the catalog's word for it, as the rules select them)."""
    return tuple(replace(t, job=job) for t in entries)


def _tables(name: str, builder: str, title: str, label: str, notes: str = "", subcategory: str = ANALYSES) -> Table:
    """A table of `tables.write_tables` (rule ladder_tables). Its builder takes the score parts
    it needs by name (`SCORE_PARTS`), and `stated_by`, `modes_note` or a table built before it
    (e.g. `main`), and returns a `Built`."""
    return Table(name, builder, title, notes, _MAIN, subcategory=subcategory, label=label, caption_tail=MODELS)


def _figure(name: str, builder: str, label: str, title: str, subcategory: str = MAIN_RESULTS) -> Table:
    """A figure of `tables.write_tables` (its builder takes what a table's does, `_tables`, and
    `png`, `title` and `provenance`, draws it and returns its data) or of `appendix.write_appendix`."""
    return Table(name, builder, title, needs=_MAIN, figure=True, data_table=False, subcategory=subcategory,
                 label=label, caption_tail=MODELS)


def _appendix(name: str, builder: str, title: str, label: str, notes: str) -> Table:
    """A table of `appendix.write_appendix` (rule ladder_appendix)."""
    return Table(name, builder, title, notes, _MAIN, subcategory=APPENDIX, label=label, caption_tail=MODELS)


#: `tables.write_tables` (rule ladder_tables): the main table, analyses, Figures 4-7
TABLES_ENTRIES = _job(
    "tables",
    _tables("main", "selfknow.protocols.ladder.tables:main_with_note",
            "LADDER main table: session CBF, bias, shape error and answer-level ECE / AUROC per model and estimator",
            "Main table: session CBF per estimator",
            subcategory=MAIN_RESULTS),
    _tables("decoder", "selfknow.protocols.ladder.tables:decoder_table",
            "LADDER feedback decoder: coverage, precision and recall of the decoded verdicts",
            "Decoder precision / recall",
            "Feedback decoder against the simulated user's intent, per model and user: coverage = share "
            "of turns with a decoded verdict; precision / recall of the decoded verdicts (overall and per "
            "sign); intent_agreement = share of decoded verdicts equal to the user's intent; "
            "global_best_share and CBF_* from the decoded feedback."),
    _tables("noise_grid", "selfknow.protocols.ladder.tables:grid_table",
            "LADDER noise x coverage grid: mean session CBF under flipped and thinned feedback", "Noise x coverage grid",
            "Clean labels thinned to the coverage and flipped at the flip rate (exact shares per session)."),
    _tables("partitions", "selfknow.protocols.ladder.tables:partition_table",
            "LADDER partitions: mean session CBF per estimator by domain, semantic and random grouping",
            "Domain partitions",
            "domain: the pool's domains; semantic: 4 subject categories (MMLU's, or the mini "
            "world's fields grouped by subject); random: seeded random groups of the "
            "semantic sizes, mean over repeats (random_sd: their sd; empty for the fixed "
            "partitions). n_groups: the groups a session scores (those with >= 2 answers), mean "
            "over sessions (and repeats); a session of a few turns meets only some of the groups."),
    _tables("r4", "selfknow.protocols.ladder.tables:r4_with_note",
            "LADDER R4 adaptive selection against always-ZS and best-of-two",
            "R4 adaptive selection"),
    _tables("controls", "selfknow.protocols.ladder.tables:controls_table",
            "LADDER matched-input controls: CBF on observed, corrected and clean labels",
            "Matched-input and clean-label controls",
            "Matched input: observed = the decoded labels; corrected = every decoded "
            "label replaced by the true outcome (missing stays missing); clean = the true "
            "outcome on every turn. The estimators are refitted under each; LSA is prompted "
            "per session on the observed and the clean history only (the paper's Table 24), "
            "so its corrected and pooled cells are empty."),
    _tables("tiers", "selfknow.protocols.ladder.tables:tiers_table",
            "LADDER subject tiers: pooled CBF per estimator in strong, mid and weak tiers",
            "Strong / medium / weak subject tiers",
            "Tiers: the authors' own per-model tiers (their released sessions' metadata) where "
            "ladder.tiers gives them, else the model's accuracy on the pool (top third strong, then mid, "
            "then weak); accuracy = the sessions' answer accuracy in the tier."),
    _tables("prefix", "selfknow.protocols.ladder.tables:prefix_table",
            "LADDER prefix curves: mean session CBF after the first turns of each session",
            "Prefix curves over turns",
            "Mean session CBF of each estimator fitted on the first `prefix` turns of every session "
            "(ladder.prefix_step apart), per condition: how fast each estimator's profile converges."),
    _tables("heldout", "selfknow.protocols.ladder.tables:heldout_with_note",
            "LADDER held-out prediction: test-half MAE of profiles fitted on the train half",
            "Held-out prediction from noisy feedback (R4)"),
    _tables("simulators", "selfknow.protocols.ladder.tables:simulators_table",
            "LADDER simulated users: mean session CBF per estimator with each user simulator", "Rule vs LLM-simulated user",
            "Mean session CBF per estimator with each simulated user (rule-based and LLM users, "
            "ladder.user / llm_user_model / user_models); coverage = share of turns with feedback, "
            "accuracy = the sessions' answer accuracy, n_sessions = sessions run with that user."),
    _tables("pooled_pairs", "selfknow.protocols.ladder.tables:pooled_pairs_table",
            "LADDER pooled pairs: CBF(Global) minus each estimator's, question-cluster bootstrap",
            "Pooled estimator comparisons",
            "Pooled CBF(Global) − CBF(other) with paired question-cluster bootstrap, "
            "estimators refitted on each resample."),
    _tables("answers", "selfknow.protocols.ladder.tables:answers_table",
            "LADDER answers: answer accuracy of each model on the session pool",
            "Answer-level metrics",
            "Answer accuracy of each model on the session pool (the turns' recorded correctness)."),
    _tables("findings", "selfknow.protocols.ladder.tables:findings",
            "LADDER, what the default finds: each level against NoMemory, second- against first-order estimators",
            "What the default finds: LADDER", subcategory=FINDINGS),
    _figure("figure4", "selfknow.protocols.ladder.tables:figure4", "Figure 4: the ladder",
            title="Self-assessment ladder: mean session CBF per level"),
    _figure("figure5", "selfknow.protocols.ladder.tables:figure5", "Figure 5: accuracy vs profile CBF",
            title="Answer accuracy vs profile CBF"),
    _figure("figure6", "selfknow.protocols.ladder.tables:figure6", "Figure 6: model x baseline CBF matrix",
            title="Session CBF by model and baseline"),
    _figure("figure7", "selfknow.protocols.ladder.tables:figure7", "Figure 7: answer reliability bins",
            title="Answer confidence reliability (10 bins)"),
)
#: `heldout.write_table34` (rule ladder_table34)
HELDOUT_ENTRIES = _job(
    "heldout",
    Table("table34", "selfknow.protocols.ladder.heldout:table34", "LADDER Table 34: held-out prediction (MAE)",
          needs=_MAIN, subcategory=ANALYSES, label="Table 34: held-out prediction (ReAct)"),
)
#: `appendix.write_appendix` (rule ladder_appendix): Tables 18 and 33, Figures 9 and 11
APPENDIX_ENTRIES = _job(
    "appendix",
    _appendix("table18", "selfknow.protocols.ladder.appendix:table18",
              "LADDER Table 18: clean-label GLAD-style and Dawid-Skene, fixed budget vs optimised",
              "Table 18: clean-label GLAD-style and Dawid-Skene optimised",
              "Clean labels: the true outcome of every turn is its label. fixed budget = the "
              "estimator as every other table fits it (EM from p = 0.5, r_in 0.75, r_out 0.55; "
              "GLAD-style 100 EM iterations with Gaussian priors on abilities and difficulties, "
              "Dawid-Skene 200); optimised = L-BFGS-B on the fit's objective from the EM fit "
              "and ladder.optimisation.restarts seeded random starts, the best kept; GLAD-style "
              "keeps its Gaussian priors unless ladder.optimisation.glad_priors is false, then "
              "its likelihood is maximised). loglik = marginal "
              "log-likelihood of the labels per label (higher is better); converged = share "
              "of sessions whose fit stopped on its tolerance; n_iter = mean EM (fixed) or "
              "L-BFGS-B (optimised) iterations of the kept fit."),
    _appendix("table33", "selfknow.protocols.ladder.appendix:table33", "LADDER Table 33: lite protocol, T={budgets[0]} vs T={budgets[1]} records",
              "Table 33: lite protocol, lite vs full record budget",
              "Each run configuration (a model's session file with one simulated user) is "
              "summarised on its first T records (sessions in order) by NoMemory's session-mean "
              "ECE of the recorded confidence and CBF; the correlations are taken across the "
              "configurations with at least the full budget of records (the paper: 23 recorded "
              "configurations). With fewer than three such configurations, or a constant "
              "summary, a correlation is undefined and left empty; table33_runs lists each "
              "configuration's summaries."),
    _appendix("table33_runs", "selfknow.protocols.ladder.appendix:table33_runs", "LADDER Table 33: run configurations", "Table 33: run configurations",
              "The run configurations of Table 33: records and NoMemory ECE / CBF on the first T records "
              "(empty: fewer records than T)."),
    _figure("figure9", "selfknow.protocols.ladder.appendix:figure9",
            "Figure 9: accuracy, recorded-confidence ECE and NoMemory CBF",
            "Figure 9: answer accuracy, recorded-confidence ECE and NoMemory CBF per model", subcategory=APPENDIX),
    _figure("figure11", "selfknow.protocols.ladder.appendix:figure11", "Figure 11: R4 and the reliability-aware estimators",
            "Figure 11: R4 and the reliability-aware estimators per model", subcategory=APPENDIX),
)
#: `extension.write_table32` (rule ladder_table32): the extension tasks (§F)
EXTENSION_ENTRIES = _job(
    "extension",
    Table("table32", "selfknow.protocols.ladder.extension:table32_with_note",
          "LADDER Table 32: recorded cross-task scores, confidence and gaps (GSM8K, HumanEval, BFCL)",
          needs=needs("ladder", "extension"), subcategory="Cross-task extension (Table 32)",
          label="Table 32: extension tasks (GSM8K, HumanEval, BFCL)"),
)
#: `crosstask.write_crosstask_tables` (rule ladder_crosstask_tables): the cross-task priors, one
#: table per configured suite (Tables 14 and 15)
CROSSTASK_ENTRIES = _job(
    "crosstask",
    Table("crosstask_mmlu_pro", "selfknow.protocols.ladder.crosstask:mmlu_pro_table",
          "LADDER Table 14: zero-shot priors against accuracy per category",
          needs=needs("ladder", "crosstask_mmlu_pro"), subcategory=CROSSTASK,
          label="Table 14: zero-shot priors on MMLU-Pro categories"),
    Table("crosstask_bbh", "selfknow.protocols.ladder.crosstask:bbh_table",
          "LADDER Table 15: zero-shot priors against accuracy per task",
          needs=needs("ladder", "crosstask_bbh"), subcategory=CROSSTASK,
          label="Table 15: zero-shot priors on BBH tasks"),
)
#: `tables.import_job` (rule ladder_import, and `selfknow ladder-eval`): the importer of released
#: sessions (`ladder_import_dir`; no "ladder" section needed)
IMPORT_ENTRIES = _job(
    "import",
    Table("import_aggregates", "selfknow.protocols.ladder.tables:import_table",
          "LADDER sessions: aggregates per model and baseline", needs=needs("import"),
          subcategory=ANALYSES, label="Released aggregates (import)", caption_tail=MODELS),
)
TABLES: tuple[Table, ...] = (*TABLES_ENTRIES, *HELDOUT_ENTRIES, *APPENDIX_ENTRIES, *EXTENSION_ENTRIES,
                             *CROSSTASK_ENTRIES, *IMPORT_ENTRIES)
TABLE = by_name(TABLES)


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


CATALOG = Catalog("ladder", CATEGORY, TABLES, config_has=config_has)
