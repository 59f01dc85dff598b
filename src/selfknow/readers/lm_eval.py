"""lm-evaluation-harness sample logs -> plain records (docs/own-results.md, "lm-evaluation-harness").

``lm_eval ... --output_path OUT --log_samples`` writes, per model, ``OUT/<model>/results_<date>.json``
(the run's model name and every task's configuration) and, per task, ``samples_<task>_<date>.jsonl``
beside it: one JSON object per (document, filter) with ``doc_id``, ``target``, the requests'
``arguments``, the model's ``filtered_resps`` and every metric the task logged (``acc``, ...).

Multiple-choice tasks (``output_type: multiple_choice``) log one (log-likelihood, is_greedy)
pair per option. Two confidence methods come from them, each scored by the metric whose
prediction it explains:

``option-likelihood``       correct = ``acc``; confidence = softmax of the options' summed
                            log-likelihoods, at the highest one (the option ``acc`` chose).
``option-likelihood-norm``  correct = ``acc_norm``; confidence = softmax of the options'
                            log-likelihoods divided by their length in characters (lm-eval's
                            ``acc_norm`` score), at the highest one.

By default one method is read per task: ``option-likelihood`` where the task logged ``acc``,
else ``option-likelihood-norm`` (their ``acc`` and ``acc_norm`` may pick different options, so
one answer would have two correctness values); the records' ``attrs["notes"]`` name the other
method a task logged, which ``methods=`` reads.

Generation tasks (``output_type: generate_until``) log no likelihood: correctness is the logged
``metric`` (default ``exact_match``) and the confidence must be a logged field the caller names
(``confidence_field``, e.g. a value the task's ``process_results`` returns); without one the
reader stops rather than invent a confidence.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from selfknow.records import json_lines

from . import plain_frame

MC_METRIC = {"option-likelihood": "acc", "option-likelihood-norm": "acc_norm"}
_RESULTS = re.compile(r"^results_(?P<date>.+)\.json$")
_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d\d-\d\dT[^_]+)\.jsonl$")


def read_lm_eval(path: str | Path, *, checkpoint: str | None = None,
                 methods: Sequence[str] | None = None, metric: str = "exact_match",
                 confidence_field: str | None = None, filter: str | None = None,
                 tasks: Sequence[str] | None = None) -> pd.DataFrame:
    """Plain records from an lm-eval output: a ``results_<date>.json``, one of its
    ``samples_<task>_<date>.jsonl`` (that task only) or a directory (every results file under
    it, one run each).

    ``checkpoint``: the label of every record (default: the run's ``model_name``).
    ``methods``: multiple-choice confidence methods (default: one per task, module doc), and
    ``confidence_field`` where listed. ``metric`` / ``confidence_field``: correctness and
    confidence fields of generation tasks. ``filter``: which filter's samples to read when a
    task logged several. ``tasks``: the tasks to read (default: every task of every run).
    """
    for method in methods or ():
        if method not in MC_METRIC and method != confidence_field:
            raise ValueError(f"{path}: unknown lm-eval method {method!r}; known: {sorted(MC_METRIC)}, and a "
                             "generation task's confidence field when it is named as confidence_field "
                             f"(--confidence-field {method})")
    # the methods of multiple-choice tasks; a generation task's is its confidence field
    methods = [m for m in methods if m in MC_METRIC] or None if methods else None
    rows: list[dict] = []
    sources: list[str] = []
    unread: dict[str, set] = {}
    for results_path, only_task in _runs(Path(path)):
        results = _read_json(results_path)
        label = checkpoint or _model_name(results, results_path)
        configs = results.get("configs")
        if not isinstance(configs, dict) or not configs:
            raise ValueError(f"{results_path}: field 'configs' (one entry per task) is missing or empty")
        date = _RESULTS.match(results_path.name).group("date")
        for task, cfg in configs.items():
            if (only_task is not None and task != only_task) or (tasks is not None and task not in tasks):
                continue
            samples_path = results_path.with_name(f"samples_{task}_{date}.jsonl")
            if not samples_path.is_file():
                raise ValueError(f"{results_path}: task {task!r} has no {samples_path.name} beside it; "
                                 "run lm_eval with --log_samples")
            reader = _task_reader(cfg, results_path, task, methods, metric, confidence_field,
                                  unread.setdefault(task, set()))
            for where, sample in _samples(samples_path, filter):
                for method, correct, conf in reader(sample, where):
                    rows.append({"item": str(_field(sample, "doc_id", where)), "checkpoint": label,
                                 "method": method, "correct": correct, "confidence": conf,
                                 "dataset": task})
                    sources.append(where)
    if not rows:
        raise ValueError(f"{path}: no lm-eval samples found" + (f" of tasks {list(tasks)}" if tasks else ""))
    out = plain_frame(rows, sources, path)
    out.attrs["notes"] = [f"task {task}: read one method of the several it logged; not read: {', '.join(sorted(ms))} "
                          "(choose with methods=, --methods)" for task, ms in unread.items() if ms]
    return out


def _runs(path: Path) -> list[tuple[Path, str | None]]:
    """(results file, task to read or None for all) for a results file, a samples file or a
    directory."""
    if path.is_dir():
        found = sorted(p for p in path.rglob("results_*.json") if _RESULTS.match(p.name))
        if not found:
            raise ValueError(f"{path}: no lm-eval results_<date>.json under this directory")
        return [(p, None) for p in found]
    if not path.is_file():
        raise ValueError(f"{path}: no such file or directory")
    if _RESULTS.match(path.name):
        return [(path, None)]
    m = _SAMPLES.match(path.name)
    if not m:
        raise ValueError(f"{path}: not an lm-eval results_<date>.json or samples_<task>_<date>.jsonl")
    results_path = path.with_name(f"results_{m.group('date')}.json")
    if not results_path.is_file():
        raise ValueError(f"{path}: its run's {results_path.name} (task configuration, model name) "
                         "is not beside it")
    return [(results_path, m.group("task"))]


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def _model_name(results: dict, path: Path) -> str:
    name = results.get("model_name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}: field 'model_name' is missing; pass a checkpoint label")
    return name


def _samples(path: Path, only_filter: str | None) -> Iterator[tuple[str, dict]]:
    """(\"file:line\", sample) for the samples of one filter."""
    lines = [(f"{path}:{n}", sample) for n, sample in json_lines(path)]
    filters = sorted({str(s.get("filter")) for _, s in lines if "filter" in s})
    if only_filter is not None:
        if only_filter not in filters:
            raise ValueError(f"{path}: no samples of filter {only_filter!r}; logged: {filters}")
    elif len(filters) > 1:
        raise ValueError(f"{path}: samples of several filters {filters}; pass filter= one of them")
    yield from ((w, s) for w, s in lines if only_filter is None or s.get("filter") == only_filter)


def _field(sample: dict, name: str, where: str):
    if name not in sample:
        raise ValueError(f"{where}: field {name!r} is missing (fields: {sorted(sample)})")
    return sample[name]


def _binary(sample: dict, name: str, where: str) -> int:
    value = _field(sample, name, where)
    if not isinstance(value, (bool, int, float)) or value not in (0, 1):
        raise ValueError(f"{where}: field {name!r} must be 0 or 1 to serve as correctness, got {value!r}")
    return int(value)


def _task_reader(cfg, results_path: Path, task: str, methods, metric: str, confidence_field, unread: set):
    """-> function (sample, where) -> [(method, correct, confidence)] for one task."""
    where_cfg = f"{results_path}: configs.{task}"
    if not isinstance(cfg, dict) or "output_type" not in cfg:
        raise ValueError(f"{where_cfg}: field 'output_type' is missing")
    kind = cfg["output_type"]
    if kind == "multiple_choice":
        if "target_delimiter" not in cfg:
            raise ValueError(f"{where_cfg}: field 'target_delimiter' is missing")
        delimiter = str(cfg["target_delimiter"])
        return lambda sample, where: _choice_records(sample, where, methods, delimiter, unread)
    if kind == "generate_until":
        if confidence_field is None:
            raise ValueError(f"{where_cfg}: a generation task logs no confidence; pass confidence_field "
                             "naming a per-sample field that carries one (e.g. a value the task's "
                             "process_results returns)")
        return lambda sample, where: [(confidence_field, _binary(sample, metric, where),
                                       _probability(_field(sample, confidence_field, where),
                                                    confidence_field, where))]
    raise ValueError(f"{where_cfg}: output_type {kind!r} is not read (multiple_choice and "
                     "generate_until are)")


def _probability(value, name: str, where: str) -> float:
    try:
        p = float(value)
    except (TypeError, ValueError):
        p = math.nan
    if isinstance(value, bool) or not 0 <= p <= 1:
        raise ValueError(f"{where}: field {name!r} must be a number in [0, 1], got {value!r}")
    return p


def _choice_records(sample: dict, where: str, methods, delimiter: str, unread: set) -> list[tuple[str, int, float]]:
    if "acc_mutual_info" in sample:
        raise ValueError(f"{where}: acc_mutual_info tasks (unconditional likelihoods logged beside "
                         "the options') are not read")
    lls = _loglikelihoods(sample, where)
    options = _continuations(sample, where)
    if len(options) != lls.size:
        raise ValueError(f"{where}: {len(options)} options in 'arguments' but {lls.size} "
                         "log-likelihoods in 'filtered_resps'")
    # lm-eval's acc_norm divides by the option's length in characters, without the delimiter
    # that joins it to the prompt
    lengths = np.array([len(o) - len(delimiter) if o.startswith(delimiter) else len(o) for o in options],
                       dtype=float)
    gold = _gold(sample.get("target"), [o[len(delimiter):] if o.startswith(delimiter) else o
                                        for o in options])
    logged = [m for m, name in MC_METRIC.items() if name in sample]
    if not methods and not logged:
        raise ValueError(f"{where}: neither 'acc' nor 'acc_norm' is logged (fields: {sorted(sample)})")
    chosen_methods = methods or logged[:1]
    unread.update(m for m in logged if m not in chosen_methods)
    out = []
    for method in chosen_methods:
        name = MC_METRIC[method]
        correct = _binary(sample, name, where)
        if method == "option-likelihood-norm" and not lengths.all():
            raise ValueError(f"{where}: an empty option has no length-normalised likelihood")
        scores = lls if method == "option-likelihood" else lls / lengths
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        chosen = int(np.argmax(scores))
        # the chosen option must be the one the logged metric scored, else the log and this
        # reading disagree (e.g. a delimiter or option order we got wrong)
        if gold is not None and int(chosen == gold) != correct:
            raise ValueError(f"{where}: field {name!r} is {correct} but option {chosen} has the highest "
                             f"{'length-normalised ' if name == 'acc_norm' else ''}log-likelihood and the "
                             f"target is option {gold}")
        out.append((method, correct, float(probs[chosen])))
    return out


def _loglikelihoods(sample: dict, where: str) -> np.ndarray:
    resps = _field(sample, "filtered_resps", where)
    try:
        # the samples writer stores every response element as a string ("-3.2", "False")
        lls = np.array([float(r[0]) for r in resps], dtype=float)
    except (TypeError, ValueError, IndexError, KeyError):
        raise ValueError(f"{where}: field 'filtered_resps' must list one [log-likelihood, is_greedy] "
                         f"per option, got {str(resps)[:200]}") from None
    if lls.size == 0 or not np.isfinite(lls).all():
        raise ValueError(f"{where}: field 'filtered_resps' holds no finite log-likelihoods: {str(resps)[:200]}")
    return lls


def _continuations(sample: dict, where: str) -> list[str]:
    """The option texts (the second argument of each loglikelihood request), in request order."""
    args = _field(sample, "arguments", where)
    if isinstance(args, dict):  # {"gen_args_0": {"arg_0": context, "arg_1": option}, ...}
        args = [args[k] for k in sorted(args, key=lambda k: int(k.rsplit("_", 1)[-1]))]
        args = [[a[k] for k in sorted(a, key=lambda k: int(k.rsplit("_", 1)[-1]))] if isinstance(a, dict) else a
                for a in args]
    if not isinstance(args, list) or not all(isinstance(a, list) and len(a) >= 2 and isinstance(a[1], str)
                                             for a in args):
        raise ValueError(f"{where}: field 'arguments' must hold one (context, option) request per option")
    return [a[1] for a in args]


def _gold(target, options: list[str]) -> int | None:
    """The target option's index when the logged target names one option (an index or its
    text), else None (several golds, or a target the log does not resolve)."""
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    if isinstance(target, str):
        if target.strip().isdigit():
            return int(target)
        if options.count(target) == 1:
            return options.index(target)
    return None
