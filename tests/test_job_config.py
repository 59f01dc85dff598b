"""Jobs receive the settings they use as params, never the whole config (issue 60): a job that
reads a config section gets `selfknow.config.job_config` of it as its param `config`, so that
Snakemake reruns it when one of those settings changes and for nothing else."""
from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest

from conftest import REPO
from selfknow.config import ConfigError, job_config, load_config, model_spec
from selfknow.report.provenance import config_fragment
from selfknow.runner import run_job

CONFIGS = ["config.yaml", "config/test.yaml"]


@pytest.fixture(scope="module", params=CONFIGS)
def config(request) -> dict:
    return load_config(REPO / request.param, check_paths=False)


def test_the_runner_gives_no_job_the_workflow_config():
    assert "snakemake.config" not in inspect.getsource(run_job)


def test_a_section_brings_the_models_and_datasets_it_names(config):
    part = job_config(config, sections=["ladder"])
    lad = config["ladder"]
    named = {*lad["models"], *(lad[k] for k in ("prompted_model", "llm_user_model") if k in lad)}
    assert named <= {m["name"] for m in part["models"]}
    assert lad["dataset"] in part["datasets"]
    assert {k for k in part if k not in ("seed", "results", "models", "datasets", "world")} == {"ladder"}
    for m in part["models"]:                    # a world model's checkpoints are named from the world
        assert model_spec(part, m["name"]) == model_spec(config, m["name"])
    names = [m["name"] for m in part["models"]]
    assert (config_fragment(part, sections=["ladder"], models=names, datasets=list(part["datasets"]))
            == config_fragment(config, sections=["ladder"], models=names, datasets=list(part["datasets"])))


def test_a_setting_changes_the_part_of_the_jobs_that_read_it_and_no_other(config):
    before = {s: job_config(config, sections=[s]) for s in ("ladder", "lcae", "persistent")}
    cfg = copy.deepcopy(config)
    cfg["ladder"]["prefix_step"] += 1
    cfg["models"].append({"name": "unrelated", "backend": "hf", "path": "x"})
    after = {s: job_config(cfg, sections=[s]) for s in before}
    assert {s for s in before if before[s] != after[s]} == {"ladder"}


def test_a_section_the_config_lacks_is_an_error_naming_it(config):
    with pytest.raises(ConfigError, match=r"no section \['ladder_import_dir'\]"):
        job_config(config, sections=["ladder_import_dir"])


def test_every_job_that_takes_a_config_gets_it_from_its_rule():
    """On both configs' DAGs, a job function that names `config` gets it as a param of its rule,
    and that param is never the whole config."""
    from selfknow.dag import workflow_jobs
    from selfknow.report.catalog import resolve

    for name in CONFIGS:
        whole = load_config(REPO / name, check_paths=False)
        jobs = [j for j in workflow_jobs(Path(REPO / name), results=REPO / "results-unused") if "job" in j.params]
        takes = [j for j in jobs if "config" in inspect.signature(resolve(j.params["job"])).parameters]
        assert len(takes) > 10
        for j in takes:
            assert "config" in j.params, j.rule
            assert set(j.params["config"]) < set(whole), j.rule


class _Recorded(Exception):
    pass


#: the rules over one persistent model, whose part of the config lists that model alone
PER_MODEL = {"persistent_reliability", "persistent_figure3", "persistent_figure4", "persistent_table19"}


def test_every_table_job_records_the_same_provenance_from_its_part_as_from_the_whole(monkeypatch):
    """Each job that takes a config computes its outputs' provenance first: from its rule's part
    of the config it records the same config fragment and model specs as it did from the whole,
    its sections as they are there but for a per-model rule's `models`, narrowed to its model."""
    from selfknow.dag import workflow_jobs
    from selfknow.report import provenance
    from selfknow.report.catalog import call_by_name, resolve
    from selfknow.runner import job_arguments

    def record(config, inputs, *, sections=(), models=(), datasets=(), repo_dir=None):
        results = config.get("results", "results")
        raise _Recorded(config_fragment(config, sections=sections, models=list(models), datasets=datasets),
                        [model_spec(config, m, results) for m in models])

    monkeypatch.setattr(provenance, "job_provenance", record)
    checked = 0
    for name in CONFIGS:
        whole = load_config(REPO / name, check_paths=False)
        for j in workflow_jobs(Path(REPO / name), results=REPO / "results-unused"):
            if "config" not in j.params:
                continue
            whole["results"] = j.params["config"]["results"]          # as the workflow sets it
            part = j.params["config"]
            sections = [k for k in part if k not in ("seed", "results", "models", "datasets", "world")]
            for sec in sections:
                narrowed = {k for k in whole[sec] if part[sec].get(k) != whole[sec][k]}
                assert narrowed == set() or (j.rule in PER_MODEL and narrowed == {"models"}
                                             and set(part[sec]["models"]) < set(whole[sec]["models"])), j.rule
            fn = resolve(j.params["job"])
            got = []
            for cfg in (part, {**whole, **{sec: part[sec] for sec in sections}}):
                known = job_arguments(j.rule, fn, inputs=dict(j.inputs), outputs=dict(j.outputs),
                                      params={**j.params, "config": cfg}, wildcards=dict(j.wildcards),
                                      extras={"threads": 1, "input_files": []})
                with pytest.raises(_Recorded) as rec:
                    call_by_name(fn, known)
                got.append(rec.value.args)
            assert got[0] == got[1], j.rule
            checked += 1
    assert checked > 40


def test_adding_a_persistent_model_leaves_the_per_model_jobs_settings_alone(tmp_path):
    """On the tiny DAG, another persistent model changes the part of the config of the jobs over
    every persistent model and of none over one model (reliability diagrams, Figures 3-4,
    Table 19), which therefore do not rerun."""
    from selfknow.dag import workflow_jobs
    from test_incremental import tiny_config, write_config

    cfg = tiny_config()
    new = "wm-extra"
    cfg["world"]["families"][new] = {**cfg["world"]["families"]["wm-small"], "seed": 7}
    cfg["models"].append({"name": new, "backend": "hf", "source": "world"})
    cfg["persistent"]["models"].append(new)
    added = write_config(cfg, tmp_path / "added.yaml")
    key = lambda j: (j.rule, tuple(sorted(j.wildcards.items())))
    before = {key(j): j.params["config"] for j in workflow_jobs(REPO / "config" / "test.yaml", results=tmp_path / "r")
              if "config" in j.params}
    after = {key(j): j.params["config"] for j in workflow_jobs(added, results=tmp_path / "r") if "config" in j.params}
    changed = {k[0] for k in before if after.get(k) != before[k]}
    assert not changed & PER_MODEL
    assert {"persistent_table1", "persistent_figure2", "knowledge_card"} <= changed
