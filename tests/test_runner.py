"""The one job runner (selfknow.runner, scripts/run_job.py): a rule's named inputs, outputs and
params reach its job function by name, a key the function does not take is an error naming
the rule and the key, and the function's summary becomes the job log's last line."""
from __future__ import annotations

import sys
import types

import pytest
from snakemake.iocontainers import InputFiles, Namedlist, OutputFiles, Params, Wildcards

from selfknow.runner import job_arguments, run_job

THIS = __name__


def metrics(sc_paths, out, seed, model, threads=1, flag=False):
    return {"sc": sc_paths, "out": out, "seed": seed, "model": model, "threads": threads, "flag": flag}


def whole(outputs, config, n):
    return {"outputs": outputs, "config": config, "n": n}


def passing(seed, **kw):
    return {"seed": int(seed), **kw}


def _args(fn, *, inputs=None, outputs=None, params=None, wildcards=None):
    return job_arguments("r", fn, inputs=inputs or {}, outputs=outputs or {}, params=params or {},
                         wildcards=wildcards or {}, extras={"threads": 3, "config": {"k": 1}, "input_files": ["a"]})


def test_keys_reach_the_function_by_name_and_wildcards_and_extras_where_it_takes_them():
    got = _args(metrics, inputs={"sc_paths": ["a", "b"]}, outputs={"out": "o"},
                params={"seed": 7, "job": "x:y", "code": "abc", "weights": {}},
                wildcards={"model": "m", "dataset": "d"})
    assert got == {"sc_paths": ["a", "b"], "out": "o", "seed": 7, "model": "m", "threads": 3}


def test_an_input_named_like_a_param_lists_its_files_and_the_job_gets_the_param():
    got = _args(metrics, inputs={"sc_paths": ["a", "b"]}, outputs={"out": "o"},
                params={"sc_paths": {("m", "test"): "a", ("m", "train"): "b"}, "seed": 1}, wildcards={"model": "m"})
    assert got["sc_paths"] == {("m", "test"): "a", ("m", "train"): "b"}


def test_a_key_the_function_does_not_take_is_an_error_naming_rule_and_key():
    with pytest.raises(TypeError, match=r"rule r: param 'extra' is not a parameter of job .*:metrics"):
        _args(metrics, inputs={"sc_paths": []}, outputs={"out": "o"}, params={"seed": 1, "extra": 2})
    with pytest.raises(ValueError, match=r"rule r: an output and a param are both named 'out'"):
        _args(metrics, outputs={"out": "o"}, params={"out": 1})


def test_a_function_may_take_every_output_at_once_or_any_key_through_kwargs():
    got = _args(whole, outputs={"t_csv": "c", "t_md": "m"}, params={"n": 2})
    assert got == {"outputs": {"t_csv": "c", "t_md": "m"}, "config": {"k": 1}, "n": 2}
    assert _args(passing, params={"a": 1}, wildcards={"seed": "3", "model": "m"}) == {"a": 1, "seed": "3"}


def _snakemake(tmp_path, job, **params):
    inp = InputFiles(["model-dir", "s1", "s2"])
    inp._set_name("sc_paths", 1, 3)
    out = OutputFiles([str(tmp_path / "o")])
    out._set_name("out", 0)
    par = Params([job, *params.values()])
    for i, k in enumerate(["job", *params]):
        par._set_name(k, i)
    wc = Wildcards(["m"])
    wc._set_name("model", 0)
    return types.SimpleNamespace(rule="persistent_x", input=inp, output=out, params=par, wildcards=wc, threads=2,
                                 config={}, log=Namedlist([str(tmp_path / "job.log")]))


def test_run_job_passes_plain_lists_and_logs_the_summary(tmp_path):
    run_job(_snakemake(tmp_path, f"{THIS}:metrics", seed=5))
    last = (tmp_path / "job.log").read_text().strip().splitlines()[-1]
    assert "persistent_x m done in " in last
    assert "sc=['s1', 's2'] " in last and "threads=2" in last and "seed=5" in last


def test_run_job_fails_in_its_log_on_a_parameter_nothing_gives(tmp_path):
    def needs(sc_paths, out, seed, missing):
        return {}
    sys.modules[THIS].needs = needs
    with pytest.raises(TypeError, match=r"needs \['missing'\]"):
        run_job(_snakemake(tmp_path, f"{THIS}:needs", seed=5))
    assert "persistent_x m failed after" in (tmp_path / "job.log").read_text()


def test_an_unnamed_output_is_an_error(tmp_path):
    sm = _snakemake(tmp_path, f"{THIS}:metrics", seed=5)
    sm.output = OutputFiles(["o1", "o2"])
    sm.output._set_name("out", 0)
    with pytest.raises(ValueError, match="rule persistent_x: every output of a job's rule has a name"):
        run_job(sm)


def empty_ok(sc_paths, out, estimators):
    return {"estimators": estimators}


def test_a_param_whose_value_is_an_empty_list_still_has_its_name(tmp_path):
    """ladder_import's default `estimators=[]` (config ladder_import_estimators) is a named
    param; a value left unnamed is still an error."""
    sys.modules[THIS].empty_ok = empty_ok
    sm = _snakemake(tmp_path, f"{THIS}:empty_ok", estimators=[])
    run_job(sm)
    assert "estimators=[]" in (tmp_path / "job.log").read_text()
    sm.params = Params([f"{THIS}:empty_ok", [], 3])
    sm.params._set_name("job", 0)
    sm.params._set_name("estimators", 1)
    with pytest.raises(ValueError, match="rule persistent_x: every param of a job's rule has a name"):
        run_job(sm)


@pytest.mark.parametrize("configfile", ["config/test.yaml", "config/paper.yaml"])
def test_every_job_of_a_dag_binds_its_rules_keys_to_its_function(configfile, tmp_path):
    """Each rule of the tiny and the paper DAG (one job per rule) gives its job function
    everything it needs and nothing it does not take, before anything runs."""
    import importlib
    import inspect

    from conftest import REPO
    from selfknow.dag import workflow_jobs

    checked = set()
    for job in workflow_jobs(REPO / configfile, results=tmp_path / "results"):
        if job.norun or job.rule in checked:
            continue
        module, _, name = job.params["job"].partition(":")
        fn = getattr(importlib.import_module(module), name)
        inputs = {k: v[0] if len(v) == 1 and isinstance(v, list) and k not in job.params else v
                  for k, v in job.inputs.items()}
        known = job_arguments(job.rule, fn, inputs=inputs, outputs=job.outputs, params=job.params,
                              wildcards=job.wildcards, extras={"threads": 1, "config": {}, "input_files": []})
        inspect.signature(fn).bind(**known)
        checked.add(job.rule)
    assert len(checked) > 40
