"""The one entry point of every workflow job (`scripts/run_job.py`).

A rule names its job with a param `job="module:function"`, a lazy reference as the catalogs
name their builders (`selfknow.report.catalog.resolve`). `run_job` calls that function with the
rule's named inputs, outputs and params, each under its own name, inside the rule's job log
(`selfknow.runlog.job_log`); the dict the function returns is the log's summary line. Every
named input, output and param must be a parameter of the function: one it does not take is an
error naming the rule and the key, never dropped. A wildcard is passed where the function takes
it (the others are already in the paths). Besides its rule's keys a function may take, by
these names, what the job knows beyond them: `threads`, `input_files` (every input path, for
provenance), `inputs` and `outputs` (every named input or output as one mapping, in place of
taking them one by one). Never the workflow's config: a job reads only the settings its rule
passes as params (a part of the config, `selfknow.config.job_config`, where it needs more than
a few), so that Snakemake reruns it when one of them changes.

Unnamed inputs are dependencies only (a model's weights, which the job finds by its spec), and
an input named like a param lists the files of that param's mapping (`input_paths`, rules/
common.smk): the job gets the param.
The params `RERUN_ONLY` exist for Snakemake to rerun the job when they change; the job does
not receive them. Snakemake's lists (`Namedlist`) reach the function as plain lists."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

#: params that are the rule's identity (`job`), or only make Snakemake rerun the job: its code
#: (selfknow.code_inputs) and its local weights (rules/common.smk `model_weights`)
RERUN_ONLY = ("job", "code", "weights")


def _plain(value: Any) -> Any:
    """A Snakemake `Namedlist` (a list subclass) as a plain list; any other value as it is."""
    return list(value) if isinstance(value, list) and type(value) is not list else value


def _named(rule: str, kind: str, items) -> dict[str, Any]:
    """The named entries of a Snakemake `Namedlist`; an output or param without a name is an
    error (its job could not take it)."""
    out = {k: _plain(v) for k, v in items.items()}
    # an output list spans several items and a param list (empty ones too) is one item: ask
    # the Namedlist which items no name covers rather than count them
    if kind != "input" and any(name is None for name, _ in items._allitems()):
        raise ValueError(f"rule {rule}: every {kind} of a job's rule has a name (the job takes it by name)")
    return out


def job_arguments(rule: str, fn: Callable, *, inputs: Mapping, outputs: Mapping, params: Mapping,
                  wildcards: Mapping, extras: Mapping) -> dict[str, Any]:
    """What a job of `rule` can give `fn` by name (`call_by_name` then takes what `fn` names,
    and says which parameters nothing gives): see the module's docstring."""
    params_of = inspect.signature(fn).parameters
    takes = set(params_of)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params_of.values())
    own = {k: v for k, v in params.items() if k not in RERUN_ONLY}
    given: dict[str, tuple[str, Any]] = {}
    for kind, named in (("input", inputs), ("output", outputs), ("param", own)):
        if kind != "param" and kind + "s" in takes:
            continue                                # taken whole, as `inputs` / `outputs`
        for k, v in named.items():
            if kind == "input" and k in own:
                continue                            # the files of the param of its name
            if k in given:
                raise ValueError(f"rule {rule}: an {given[k][0]} and a {kind} are both named {k!r}")

            if k not in takes and not takes_any:

                raise TypeError(f"rule {rule}: {kind} {k!r} is not a parameter of job "
                                f"{fn.__module__}:{fn.__name__}")
            given[k] = (kind, v)
    known = {k: v for k, (_, v) in given.items()}
    for k, v in wildcards.items():
        if k in takes and k not in known:
            known[k] = v
    for k, v in {**extras, "inputs": dict(inputs), "outputs": dict(outputs)}.items():
        if k in takes and k not in known:
            known[k] = v
    return known


def run_job(snakemake) -> None:
    """Run the job `snakemake.params.job` names for the rule Snakemake's script preamble
    describes (`snakemake`), under its log."""
    from selfknow.code_inputs import running
    from selfknow.report.catalog import call_by_name, resolve
    from selfknow.runlog import job_log

    rule = snakemake.rule
    fn = resolve(snakemake.params.job)
    wildcards = _named(rule, "wildcard", snakemake.wildcards)
    known = job_arguments(rule, fn, inputs=_named(rule, "input", snakemake.input),
                          outputs=_named(rule, "output", snakemake.output),
                          params=_named(rule, "param", snakemake.params), wildcards=wildcards,
                          extras={"threads": snakemake.threads, "input_files": list(snakemake.input)})
    title = " ".join([rule, *map(str, wildcards.values())])
    with running(snakemake.params.job), job_log(snakemake.log[0], title) as summary:
        summary.update(call_by_name(fn, known) or {})
