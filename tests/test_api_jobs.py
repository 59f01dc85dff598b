"""API requests are made by CPU jobs, never by a job that holds a GPU (issue 24): over the paper
config's DAG, every job that asks for a GPU is checked for an API (`openai` backend) model
among the model specs its rule hands to its script (the only way a job's code reaches a model)."""
from __future__ import annotations

from collections.abc import Mapping

import pytest

from conftest import REPO
from dag import dag_jobs


def _api_models(value) -> set[str]:
    """Names of the `openai` model specs anywhere in a job's params."""
    if isinstance(value, Mapping):
        keys = list(value.keys())  # a config mapping refuses lookups of keys it lacks
        own = {value["name"]} if "backend" in keys and value["backend"] == "openai" else set()
        return own.union(*(_api_models(value[k]) for k in keys))
    if isinstance(value, (list, tuple)):
        return set().union(*(_api_models(v) for v in value))
    return set()


@pytest.fixture(scope="module")
def paper_jobs(tmp_path_factory):
    """(rule, GPUs, API models in its params) of every job `all_tables` of config/paper.yaml runs."""
    jobs = dag_jobs(REPO / "config" / "paper.yaml", tmp_path_factory.mktemp("results"), forceall=True)
    return [(job.rule.name, int(job.resources.get("gpu", 0)), _api_models(dict(job.params.items()))) for job in jobs]


def test_the_judge_runs_in_cpu_jobs_of_its_own(paper_jobs):
    by_rule: dict[str, list[tuple[int, set[str]]]] = {}
    for rule, gpus, api in paper_jobs:
        by_rule.setdefault(rule, []).append((gpus, api))
    # the beam search holds a GPU and asks no judge; the judge's jobs hold none
    assert all(g > 0 and not api for g, api in by_rule["persistent_sc"])
    assert len(by_rule["persistent_judge"]) == len(by_rule["persistent_sc"])
    assert all(g == 0 and api == {"gpt-5.4-judge"} for g, api in by_rule["persistent_judge"])
    assert all(g == 0 for g, _ in by_rule["llm_judge"])


def test_ladder_sessions_answer_on_the_gpu_and_talk_to_the_user_on_the_cpu(paper_jobs):
    by_rule: dict[str, list[tuple[int, set[str]]]] = {}
    for rule, gpus, api in paper_jobs:
        by_rule.setdefault(rule, []).append((gpus, api))
    # a local examinee answers in a GPU job of its own; the API user (qwen-max; qwen-turbo
    # for qwen-max) replies in a CPU job, one per examinee
    assert any(g > 0 and not api for g, api in by_rule["ladder_answers"])
    assert len(by_rule["ladder_sessions"]) == len(by_rule["ladder_answers"])
    assert all(g == 0 and api <= {"qwen-max", "qwen-turbo"} and api for g, api in by_rule["ladder_sessions"])


def test_no_gpu_job_calls_an_api_model(paper_jobs):
    assert not [(rule, sorted(api)) for rule, gpus, api in paper_jobs if gpus and api]
