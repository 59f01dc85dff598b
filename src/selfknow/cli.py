"""`selfknow` console script: one argparse subcommand per task, kept in a registry.

Add a subcommand with :func:`register` (name, help, a function adding its arguments, a
function running it). A command signals bad input by raising ``ValueError`` (or
``FileNotFoundError``); :func:`main` prints the message and exits with status 2.

    selfknow rasch MATRIX.csv|MATRIX.parquet OUTDIR [--method jml|cml] [--abilities wle|mle]
                   [--no-bias-correction] [--quiet]
    selfknow lcae-eval STAGE1 STAGE2 OUTDIR [--method jml|cml] [--eps E] [--repeats first|majority]
                       [--prices PRICES] [--quiet]
    selfknow ladder-eval SESSIONS... OUTDIR [--estimators NAME...]
    selfknow plan CONFIG.yaml [TARGET] [--results DIR] [--csv PLAN.csv]
    selfknow fidelity [CONFIG.yaml] [--docs]
    selfknow rehearse [--results DIR] [--cores N] [-- SNAKEMAKE_ARGS...]
    selfknow preflight CONFIG.yaml [CONFIG.yaml...] [--timeout S]
    selfknow persistent-eval RECORDS OUTDIR [--config CONFIG.yaml] [--min-contrast N] [--bootstrap N] ...
    selfknow export-records RESULTS OUT.csv|.jsonl|.parquet [--model M] [--evalset main|transfer] [--methods ...]
    selfknow check-estimators RESULTS|RECORDS [--model M] [--bootstrap N] [--seed S] [--csv OUT.csv] [--strict]
    selfknow findings-summary RESULTS
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], "int | None"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Configure
    run: Run


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, configure: Configure, run: Run) -> None:
    """Add a subcommand; names are unique."""
    if name in COMMANDS:
        raise ValueError(f"subcommand {name!r} is already registered")
    COMMANDS[name] = Command(name, help, configure, run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="selfknow", description="LLM self-knowledge pipeline tools.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args._run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"selfknow {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return int(status or 0)


def _progress(command: str, quiet: bool) -> Callable[[str], None]:
    """A progress printer for stderr: "<command> [  elapsed s] message", silent when `quiet`."""
    start = time.perf_counter()

    def progress(message: str) -> None:
        if not quiet:
            print(f"{command} [{time.perf_counter() - start:6.1f} s] {message}", file=sys.stderr, flush=True)

    return progress


# ----------------------------------------------------------------------------- rasch

def _configure_rasch(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrix", type=Path,
                   help="CSV or .parquet: first column examinee ids, one column per item, 0/1, blank/null = missing")
    p.add_argument("outdir", type=Path, help="writes abilities.csv, difficulties.csv, fit.json here")
    p.add_argument("--method", choices=["jml", "cml"], default="jml",
                   help="difficulty calibration: JML with (L-1)/L correction, or CML (default: jml)")
    p.add_argument("--abilities", choices=["wle", "mle"], default="wle",
                   help="anchored ability estimator (default: wle, finite for extreme scores)")
    p.add_argument("--no-bias-correction", action="store_true", help="JML without the (L-1)/L factor")
    p.add_argument("--tol", type=float, default=1e-6, help="convergence tolerance in logits")
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run_rasch(args: argparse.Namespace) -> int:
    """Fit the Rasch model to a response matrix file and write abilities, difficulties and fit."""
    import numpy as np
    import pandas as pd

    from selfknow.records import write_csv, write_json
    from selfknow.response_io import read_responses
    from selfknow.stats.item_fit import band_counts, fit_band, item_fit_table
    from selfknow.stats.rasch import fit_rasch

    progress = _progress("rasch", args.quiet)
    R, examinees, items = read_responses(args.matrix, progress)
    try:
        fit = fit_rasch(R, args.method, bias_correction=not args.no_bias_correction,
                        ability_method=args.abilities, tol=args.tol, max_iter=args.max_iter, progress=progress)
    except ValueError as exc:
        raise ValueError(f"{args.matrix}: {exc}") from exc
    args.outdir.mkdir(parents=True, exist_ok=True)
    abilities = pd.DataFrame({
        "examinee": examinees, "theta": fit.theta, "se_theta": fit.se_theta,
        "raw_score": R.row_scores.astype(int), "n_responses": R.row_counts,
        "infit": fit.infit_person, "outfit": fit.outfit_person,
        "band": fit_band(fit.infit_person, fit.outfit_person), "status": fit.row_status,
    })
    difficulties = item_fit_table(fit, items)
    difficulties["n_responses"] = R.col_counts.astype(int)
    difficulties["p_correct"] = R.col_scores / np.maximum(R.col_counts, 1)
    write_csv(abilities, args.outdir / "abilities.csv")
    write_csv(difficulties, args.outdir / "difficulties.csv")
    write_json({
        "input": str(args.matrix),
        "method": fit.method,
        "ability_method": fit.ability_method,
        "bias_correction_factor": fit.bias_correction,
        "scale": "mean difficulty of the calibrated (non-extreme) items = 0",
        "converged": fit.converged,
        "n_iter": fit.n_iter,
        "n_examinees": len(examinees),
        "n_items": len(items),
        "missing_fraction": R.missing_fraction,
        "extreme_rows": [{"examinee": examinees[i], "status": str(fit.row_status[i])} for i in fit.extreme_rows],
        "extreme_cols": [{"item": items[j], "status": str(fit.col_status[j])} for j in fit.extreme_cols],
        "item_fit_bands": band_counts(fit.infit_item, fit.outfit_item),
    }, args.outdir / "fit.json")
    print(f"rasch ({fit.method}): {len(examinees)} examinees x {len(items)} items, converged={fit.converged} "
          f"in {fit.n_iter} iterations; {len(fit.extreme_rows)} extreme rows, {len(fit.extreme_cols)} "
          f"extreme columns -> {args.outdir}")
    return 0


register("rasch", "Fit a Rasch model to an examinee x item 0/1 matrix (CSV or parquet; blank = missing).",
         _configure_rasch, run_rasch)

# ----------------------------------------------------------------------------- lcae-eval

_RECORDS = "CSV, JSON Lines (.jsonl) or parquet; the format: docs/own-results.md"


def _done(command: str, what: str, outdir: Path) -> int:
    """The last line of a command that evaluates records from elsewhere: what it read, and where
    its tables went; the exit status."""
    print(f"{command}: {what} -> {outdir}")
    return 0


def _configure_lcae_eval(p: argparse.ArgumentParser) -> None:
    from selfknow.schema import defaults

    lcae = defaults("lcae")
    p.add_argument("stage1", type=Path, help=f"Stage-1 responses: examinee, item, correct (0/1)[, repeat, ...]; {_RECORDS}")
    p.add_argument("stage2", type=Path, help="Stage-2 self-assessments: examinee, item, condition, error_p (or "
                                             f"confidence)[, repeat, correct_final, route, ...]; {_RECORDS}")
    p.add_argument("outdir", type=Path, help="writes irt/, stage3.parquet, tables/ (Tables I-III, item fit) here")
    p.add_argument("--method", choices=["jml", "cml"], default=lcae["rasch_method"],
                   help=f"Rasch difficulty calibration (default: {lcae['rasch_method']}, as lcae.rasch_method)")
    p.add_argument("--eps", type=float, default=lcae["lcae_eps"],
                   help=f"BCE clip of stated error probabilities (default: {lcae['lcae_eps']:g}, as lcae.lcae_eps)")
    p.add_argument("--repeats", choices=["first", "majority"], default="first",
                   help="one Stage-1 response from an examinee's repeats of an item: the lowest repeat's, or the "
                        "majority outcome (ties: the lowest repeat's) (default: first)")
    p.add_argument("--prices", type=Path, help="model, price_in, price_out (USD per million tokens): adds cost "
                                               f"efficiency and Figure 2; {_RECORDS}")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run_lcae_eval(args: argparse.Namespace) -> int:
    """LCAE's Stage 1 fit, Stage 3 and tables on Stage-1 and Stage-2 records from anywhere."""
    from selfknow.protocols.lcae.evaluate import lcae_eval, read_prices

    progress = _progress("lcae-eval", args.quiet)
    prices = read_prices(args.prices) if args.prices else None
    summary = lcae_eval(args.stage1, args.stage2, args.outdir, method=args.method, eps=args.eps,
                        repeats=args.repeats, prices=prices, progress=progress)
    return _done("lcae-eval", f"{summary['examinees']} examinees x {summary['items']} items; Stage 3 of "
                              f"{summary['examinees_stage3']} examinees", args.outdir)


register("lcae-eval", "LCAE on your own records: Stage-1 responses and Stage-2 self-assessments in, the Rasch "
         "fit, LCAE (BCE and squared), Friedman/Wilcoxon tests, Tables I-III and item fit out.",
         _configure_lcae_eval, run_lcae_eval)

# ----------------------------------------------------------------------------- ladder-eval

def _configure_ladder_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", type=Path, nargs="+", metavar="SESSIONS",
                   help="session files or directories: released capbound_sessions_*.json and session tables "
                        f"(model, session_id, turn, domain, confidence, correct, feedback_text, in_expertise); {_RECORDS}")
    p.add_argument("outdir", type=Path, help="writes import_aggregates.{csv,md,tex,html} and sessions.csv here")
    p.add_argument("--estimators", nargs="+", metavar="NAME",
                   help="estimators to score (default: the importer's, as the workflow's ladder_import)")


def run_ladder_eval(args: argparse.Namespace) -> int:
    """LADDER's offline estimators on sessions from anywhere, as the workflow's importer scores them."""
    from selfknow.protocols.ladder.catalog import IMPORT_ENTRIES
    from selfknow.protocols.ladder.tables import import_job

    out = args.outdir
    outputs = {f"{t.name}_{ext}": str(out / f"{t.name}.{ext}") for t in IMPORT_ENTRIES for ext in ("csv", "md")}
    summary = import_job([str(s) for s in args.sources], outputs, args.estimators, out_sessions=str(out / "sessions.csv"))
    return _done("ladder-eval", f"{summary['sessions']} sessions of {summary['models']} models, {summary['rows']} "
                                "(model, estimator) rows", out)


register("ladder-eval", "LADDER on your own sessions: the estimators that need no model call, per session and "
         "averaged as the authors do, from released or documented-format session files.",
         _configure_ladder_eval, run_ladder_eval)

# ----------------------------------------------------------------------------- plan

def _configure_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="the workflow config (YAML), e.g. config/paper.yaml")
    p.add_argument("target", nargs="?", default="all_tables",
                   help="the Snakemake target whose jobs are counted: a rule or an output path relative to the "
                        "workflow's root (default: all_tables)")
    p.add_argument("--results", type=Path, help="results directory whose finished jobs count as cached "
                                                "(default: the config's `results`)")
    p.add_argument("--csv", type=Path, help="also write the plan, one row per model and stage, here")
    p.add_argument("--runtimes", type=Path, help="where to write each job's time limit from the plan, which the "
                   "rules' SLURM runtime takes (default: <results>/plan/runtimes.json)")


def run_plan(args: argparse.Namespace) -> int:
    """Print what a run of the config would request of each model: requests, tokens, dollars, hours."""
    from selfknow.config import load_config
    from selfknow.plan import make_plan
    from selfknow.plan_report import render_plan, render_prices
    from selfknow.records import write_csv

    cfg = load_config(args.config)
    runtimes = args.runtimes or Path(args.results or cfg["results"]) / "plan" / "runtimes.json"
    df, datasets = make_plan(args.config, args.target, args.results, runtimes=runtimes)
    if args.csv:
        write_csv(df, args.csv)
    print(render_plan(df, datasets), end="")
    print("\n" + render_prices(cfg, df), end="")
    print(f"plan: job time limits -> {runtimes}", file=sys.stderr)
    return 0


register("plan", "Before launch: requests, tokens, API dollars and GPU-hours per model and stage of a config.",
         _configure_plan, run_plan)

# ----------------------------------------------------------------------------- fidelity

def _configure_fidelity(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, nargs="?", default=Path("config/paper.yaml"),
                   help="the config checked against fidelity/manifest.yaml (default: config/paper.yaml)")
    p.add_argument("--docs", action="store_true",
                   help="also rewrite the deviation table of docs/deviations.md from the manifest")


def run_fidelity(args: argparse.Namespace) -> int:
    """Check a config against the papers' protocol constants; 1 if any differs undocumented."""
    from selfknow.config import load_config
    from selfknow.fidelity import check_config, load_manifest, quote_problems, write_deviations

    manifest = load_manifest()
    if args.docs and write_deviations(manifest):
        print("docs/deviations.md: deviation table rewritten from fidelity/manifest.yaml")
    problems = check_config(load_config(args.config), manifest)
    for p in problems:
        print(f"{args.config}: {p}")
    print(f"{args.config}: {len(manifest.settings) - len(problems)} of {len(manifest.settings)} protocol "
          f"settings as the manifest records them; {len(manifest.deviations)} deviations")
    unheld = quote_problems(manifest, None)
    for p in unheld:
        print(f"fidelity/manifest.yaml: {p}")
    quoted = sum(s.quote is not None for s in manifest.settings)
    unquoted = sum(s.unquoted is not None for s in manifest.settings)
    print(f"fidelity/manifest.yaml: {quoted} settings quoted, {unquoted} say why they cannot be, "
          f"{len(manifest.settings) - quoted - unquoted} neither")
    return 1 if problems or unheld else 0


register("fidelity", "Check a config against the papers' protocol constants (fidelity/manifest.yaml).",
         _configure_fidelity, run_fidelity)

# ----------------------------------------------------------------------------- rehearse

def _configure_rehearse(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", help="results directory (default: the rehearsal config's, results/rehearsal)")
    p.add_argument("--cores", type=int, default=2, help="cores Snakemake may use (default: 2)")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER,
                   help="after --: more Snakemake options, e.g. -- -n (a dry run)")


def run_rehearse(args: argparse.Namespace) -> int:
    """The paper configs end to end offline, on local stand-ins for every external resource."""
    from selfknow.rehearsal.harness import rehearse

    extra = args.snakemake_args[1:] if args.snakemake_args[:1] == ["--"] else args.snakemake_args
    return rehearse(results=args.results, cores=args.cores, snakemake_args=extra)


register("rehearse", "Run config/paper.yaml + config/rehearsal.yaml end to end offline on local stand-ins "
         "(tiny hub models, dataset fixtures, an OpenAI-compatible server on 127.0.0.1).",
         _configure_rehearse, run_rehearse)

# ----------------------------------------------------------------------------- preflight

def _configure_preflight(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="+", type=Path,
                   help="config files, later ones merged over earlier ones as Snakemake merges them")
    from selfknow.preflight import TIMEOUT_S

    p.add_argument("--timeout", type=float, default=TIMEOUT_S,
                   help=f"seconds each network check may take, DNS included (default {TIMEOUT_S:g}); the hub and "
                        "the endpoints are asked at once")
    p.add_argument("--cluster", action="store_true",
                   help="check as for a run whose jobs run on cluster nodes (--profile slurm; the workflow's own "
                        "check knows): a model served at localhost is a problem")


def run_preflight(args: argparse.Namespace) -> int:
    """One line per problem on stdout, exit status 1 if any."""
    from selfknow.preflight import preflight
    from selfknow.rehearsal.harness import load_config

    config = load_config([str(c) for c in args.configs], check_paths=False)
    problems = preflight(config, timeout_s=args.timeout, cluster=args.cluster)
    for line in problems:
        print(line)
    print(f"preflight: {len(problems)} problem(s) in {' + '.join(map(str, args.configs))}", file=sys.stderr)
    return 1 if problems else 0


register("preflight", "Check a config's endpoints and keys, hub models and datasets before a launch "
         "(one line per problem, naming the config key)", _configure_preflight, run_preflight)


# ----------------------------------------------------------------------------- persistent-eval

def _configure_persistent_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", type=Path, help="plain records: .csv, .jsonl or .parquet, one row per (item, "
                   "checkpoint, method) with correct (0/1) and confidence in [0, 1]; optional role, dataset, seed")
    p.add_argument("outdir", type=Path, help="writes metrics.csv, replicates.npz, contrast_sets.csv, table1/8/11/12 "
                                             "(.csv .md .tex .html) and reliability diagrams here")
    p.add_argument("--format", default="auto", choices=["auto", "plain", "lm-eval", "inspect"],
                   help="record format: plain records, an lm-eval output (--output_path with --log_samples: "
                        "a results_*.json, a samples_*.jsonl or a directory) or inspect_ai logs (a .eval/.json "
                        "log or a log directory); default: by suffix")
    p.add_argument("--methods", type=_names, help="comma-separated confidence methods to evaluate, in this order "
                   "(lm-eval: option-likelihood, option-likelihood-norm; inspect: sequence-prob, score:NAME; "
                   "plain: values of the method column); default: every method of plain records, one per "
                   "lm-eval task, sequence-prob of inspect logs")
    p.add_argument("--checkpoints", type=_names, help="comma-separated checkpoints in training order, each NAME "
                   "or NAME=LABEL; NAME is a logged checkpoint or its last path component (lm-eval's model "
                   "path, inspect's hf/NAME); default: as logged, in order of first appearance")
    p.add_argument("--confidence-field", help="the logged field that holds a confidence: an lm-eval generation "
                   "task's per-sample field, or an inspect scorer (read as method score:NAME)")
    p.add_argument("--config", type=Path, help="take the settings below from this workflow config's `persistent` "
                   "section (default: the schema's defaults, the paper's)")
    p.add_argument("--min-contrast", type=int, help="smallest contrast set the contrast metrics use "
                                                    "(persistent.min_contrast)")
    p.add_argument("--bootstrap", type=int, help="bootstrap replicates (persistent.bootstrap_replicates)")
    p.add_argument("--bootstrap-ece", type=int, help="replicates of the SmoothECE columns, 0 = none "
                                                     "(persistent.bootstrap_ece_replicates)")
    p.add_argument("--seed", type=int, help="bootstrap seed (persistent.bootstrap_seed)")
    p.add_argument("--label", default="", help="prefix of the tables' metric columns, e.g. a model name")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _names(text: str) -> list[str]:
    """A comma-separated list of names."""
    return [t.strip() for t in text.split(",") if t.strip()]


def run_persistent_eval(args: argparse.Namespace) -> int:
    """The persistent paper's contrast-set and full-set evaluation of plain records."""
    from selfknow.protocols.persistent.own_records import Settings, persistent_eval

    if args.config:
        from selfknow.config import load_config

        pc = load_config(args.config, check_paths=False)["persistent"]
    else:
        from selfknow.schema import defaults

        pc = defaults("persistent")
    n_boot = pc["bootstrap_replicates"] if args.bootstrap is None else args.bootstrap
    # the schema's derived default of bootstrap_ece_replicates: bootstrap_replicates
    n_ece = pc.get("bootstrap_ece_replicates", n_boot) if args.bootstrap_ece is None else args.bootstrap_ece
    settings = Settings(pc["min_contrast"] if args.min_contrast is None else args.min_contrast, n_boot, n_ece,
                        pc["bootstrap_seed"] if args.seed is None else args.seed, pc["confidence_clamp"],
                        pc["bt_max_iter"])
    start = time.perf_counter()

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"persistent-eval [{time.perf_counter() - start:6.1f} s] {message}", file=sys.stderr, flush=True)

    options = {"methods": args.methods, "checkpoints": args.checkpoints, "confidence_field": args.confidence_field}
    summary = persistent_eval(args.records, args.outdir, settings, fmt=args.format, label=args.label,
                              progress=progress, read_options=options)
    for note in summary["notes"]:
        print(f"persistent-eval: note: {args.records}: {note}", file=sys.stderr)
    datasets = ", ".join(d for d in summary["datasets"] if d) or "one dataset"
    print(f"persistent-eval: {summary['records']} records ({datasets}) -> {args.outdir}")
    return 0


register("persistent-eval", "The persistent-calibration paper's contrast-set evaluation of your own records "
         "(correctness and confidence per item, checkpoint and method): metrics, bootstrap, tables, diagrams.",
         _configure_persistent_eval, run_persistent_eval)

# ----------------------------------------------------------------------------- export-records

def _configure_export_records(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a workflow results directory with persistent tables built")
    p.add_argument("out", type=Path, help="the plain records to write: .csv, .jsonl or .parquet")
    p.add_argument("--model", help="the persistent model (needed when the run has several)")
    p.add_argument("--evalset", choices=["main", "transfer"], default="main",
                   help="the training datasets' test split (main) or the transfer dataset (default: main)")
    p.add_argument("--methods", type=_names, help="comma-separated methods to keep, in this order (default: all)")


def run_export_records(args: argparse.Namespace) -> int:
    """Write the records a workflow run's persistent metrics evaluated in the plain format."""
    from selfknow.protocols.persistent.own_records import export_records
    from selfknow.readers.plain import write_plain

    df = export_records(args.results, model=args.model, evalset=args.evalset, methods=args.methods)
    write_plain(df, args.out)
    print(f"export-records: {len(df)} records ({df['method'].nunique()} methods, "
          f"{df['dataset'].nunique()} datasets) -> {args.out}")
    return 0


register("export-records", "Export the records a workflow run's persistent metrics evaluated, in the plain "
         "format persistent-eval reads.", _configure_export_records, run_export_records)


# ----------------------------------------------------------------------------- check-estimators

def _configure_check_estimators(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", type=Path,
                   help="a workflow results directory, or plain records (`selfknow export-records` output)")
    p.add_argument("--model", help="the persistent model of a results directory (needed when it has several)")
    p.add_argument("--bootstrap", type=int, default=2000, help="resamples of the questions (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="the resampling seed (default 0)")
    p.add_argument("--csv", type=Path, help="also write the cells to this CSV")
    p.add_argument("--strict", action="store_true", help="exit with status 1 when a cell fails")
    p.add_argument("--probe", action="store_true",
                   help="also fit a logistic probe on each evaluation checkpoint's last hidden state (a results "
                        "directory only): is the signal there for the estimators to learn?")
    p.add_argument("--weights", type=Path,
                   help="the model's checkpoint directories for --probe (default: <records>/world/models/<model>)")


def run_check_estimators(args: argparse.Namespace) -> int:
    """Print, per trained method x dataset x evaluation checkpoint, the seed-averaged AUC with its
    interval and the sd of the confidences, and whether the cell passes."""
    import pandas as pd

    from selfknow.protocols.persistent.learning_check import check_estimators, summary_line
    from selfknow.protocols.persistent.own_records import export_records
    from selfknow.readers.plain import read_plain
    from selfknow.records import write_csv

    if args.probe and importlib.util.find_spec("sklearn") is None:
        raise SystemExit("selfknow check-estimators: --probe needs scikit-learn, which the core install leaves out "
                         "(pip install scikit-learn; the [test] extra has it)")
    src = args.records
    records = export_records(src, model=args.model) if src.is_dir() else read_plain(src)
    cells = check_estimators(records, n_boot=args.bootstrap, seed=args.seed)
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(cells.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(summary_line(cells))
    if args.csv:
        write_csv(cells, args.csv)
    lcae_ok = _print_lcae(src)
    if args.probe:
        _print_probe(args, cells)
    return 1 if args.strict and not (cells["passed"].all() and lcae_ok) else 0


def _print_lcae(results: Path) -> bool:
    """Issue #46's LCAE check on a results directory's Stage-3 records, when it has them (records
    given as a file have none)."""
    from selfknow.protocols.lcae.check import lcae_check
    from selfknow.protocols.lcae.paths import STAGE3
    from selfknow.records import read_parquet

    path = results / STAGE3
    if not path.exists():
        return True
    lines, ok = lcae_check(read_parquet(path))
    print("\n" + "\n".join(lines))
    return ok


def _print_probe(args: argparse.Namespace, cells) -> None:
    from selfknow.protocols.persistent.hidden_probe import probe_cells
    from selfknow.protocols.persistent.own_records import records_model

    if not args.records.is_dir():
        raise SystemExit("selfknow check-estimators: --probe needs a results directory (it reads the run's "
                         "self-consistency tables and the checkpoint weights)")
    model = records_model(args.records, args.model)
    weights = args.weights or args.records / "world" / "models" / model
    checkpoints = {d: list(dict.fromkeys(g["checkpoint"])) for d, g in cells.groupby("dataset", sort=False)}
    probe = probe_cells(args.records, model, checkpoints, weights, n_boot=args.bootstrap, seed=args.seed)
    best = cells.groupby(["dataset", "checkpoint"])["auc"].max().rename("best_estimator_auc")
    probe = probe.join(best, on=["dataset", "checkpoint"])
    print(f"\nLogistic probe on the last hidden state of the confidence prompt ({model}; fit on each "
          "checkpoint's train questions, C by cross-validation, AUC on its test questions):")
    print(probe.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


register("check-estimators", "Do a run's trained confidence estimators learn? Seed-averaged AUC with a bootstrap "
         "interval and the confidences' sd per method, dataset and evaluation checkpoint.",
         _configure_check_estimators, run_check_estimators)


# ----------------------------------------------------------------------------- findings-summary

def _configure_findings_summary(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", help="a workflow run's results directory (its tables/<paper>/findings.csv)")


def run_findings_summary(args: argparse.Namespace) -> int:
    import pandas as pd

    from selfknow.report.findings import PAPERS, summary_markdown

    tables = {paper: pd.read_csv(path) for paper, _ in PAPERS
              if (path := Path(args.results) / "tables" / paper / "findings.csv").is_file()}
    if not tables:
        raise FileNotFoundError(f"{args.results}: no tables/<paper>/findings.csv of "
                                f"{', '.join(p for p, _ in PAPERS)}; has the run built its findings tables?")
    sys.stdout.write(summary_markdown(tables))
    return 0


register("findings-summary", "The README's summary of what a run finds: every row of each paper's findings table, "
         "grouped by verdict, as Markdown.", _configure_findings_summary, run_findings_summary)


if __name__ == "__main__":
    sys.exit(main())
