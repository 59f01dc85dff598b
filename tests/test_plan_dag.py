"""`selfknow plan` enumerates its jobs from Snakemake's DAG: every rule of a config's DAG is
counted or declared free in one place, and a rule added to the workflow changes the plan
without an edit of the plan's code."""
import fnmatch
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO

from selfknow.dag import snakemake_dag
from selfknow.plan import COUNTERS, FREE_RULES, PlanError, is_free, make_plan
from selfknow.records import write_parquet


# (config/rehearsal.yaml is an overlay of the paper config with the same rules, tests/test_rehearsal.py)
CONFIGS = ("config.yaml", "config/test.yaml", "config/paper.yaml")


@pytest.fixture(scope="module")
def workflow_rules(tmp_path_factory):
    """Per config: the rules of its DAG (name -> whether the rule runs nothing) and every rule
    its workflow defines."""
    out = {}
    for config in CONFIGS:
        with snakemake_dag(REPO / config, results=tmp_path_factory.mktemp("results"), root=REPO) as jobs:
            out[config] = ({j.rule.name: j.rule.norun for j in jobs}, {r.name for r in jobs[0].dag.workflow.rules})
    return out


@pytest.mark.parametrize("config", CONFIGS)
def test_every_rule_of_the_dag_is_counted_or_free(workflow_rules, config):
    in_dag, _ = workflow_rules[config]
    missing = sorted(r for r, norun in in_dag.items() if not norun and r not in COUNTERS and not is_free(r))
    assert not missing, f"rules neither counted (selfknow.plan.COUNTERS) nor free (FREE_RULES): {missing}"
    assert not [r for r in COUNTERS if is_free(r)], "a rule both counted and declared free"


def test_every_entry_names_a_rule(workflow_rules):
    """No stale entry: each counted rule and each free pattern names a rule of the workflow
    under one of the configs, or one the rules define under a config section none of them
    sets (ladder_import_dir)."""
    rules = set().union(*(defined for _, defined in workflow_rules.values()))
    rules |= {m for f in (REPO / "rules").glob("*.smk")
              for m in re.findall(r"^\s*(?:rule|use rule \w+ as) (\w+)", f.read_text(encoding="utf-8"), re.M)}
    assert set(COUNTERS) <= rules, set(COUNTERS) - rules
    assert all(fnmatch.filter(rules, p) for p in FREE_RULES), [p for p in FREE_RULES if not fnmatch.filter(rules, p)]


def _workflow_copy(root: Path) -> Path:
    """The workflow's rules, script, report catalog and Snakefile, copied to `root` (nothing
    runs; each rule's `code` param reads the package's source)."""
    for d in ("rules", "scripts", "workflow_report"):
        shutil.copytree(REPO / d, root / d)
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    return root


@pytest.fixture
def small(tmp_path):
    """An LCAE-only config on 5 test items on disk: no greedy generation in its DAG."""
    results = tmp_path / "results"
    for split, n in (("train", 2), ("test", 5)):
        write_parquet(pd.DataFrame({
            "item_id": [f"{split}{i}" for i in range(n)], "dataset": "mc", "domain": "x",
            "question": [f"{split} question {i}?" for i in range(n)], "choices": [["a", "b", "c", "d"]] * n,
            "answer": ["A"] * n, "aliases": [[] for _ in range(n)], "split": split}),
            results / "items" / "mc" / f"{split}.parquet")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "seed": 1, "results": str(results),
        "models": [{"name": "api", "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}],
        "datasets": {"mc": {"loader": "mmlu", "path": str(tmp_path), "subjects": ["x"], "subject_range": [0, 5]}},
        "lcae": {"dataset": "mc", "n_items": 3, "strategies": ["standard"], "examinee_models": ["api"],
                 "repeats": 1, "conditions": ["baseline"]}}))
    return path


def test_a_rule_added_to_the_workflow_is_planned_without_editing_plan(small, tmp_path):
    """A target rule appended to a copy of the Snakefile asks for greedy answers the rules
    never asked for: the plan counts their jobs (5 test items, one request each) through the
    existing generate_greedy entry, and the default target's plan has no such row."""
    root = _workflow_copy(tmp_path / "wf")
    with open(root / "Snakefile", "a", encoding="utf-8") as f:
        f.write('\n\nrule extra_answers:\n    input:\n'
                '        f"{R}/generations/api/final/greedy/mc.parquet",\n')
    df, _ = make_plan(small, "extra_answers", root=root)
    assert df[["model", "stage", "jobs", "requests"]].values.tolist() == [["api", "generate", 1, 5]]
    assert "generate" not in set(make_plan(small, root=root)[0]["stage"])


def test_a_rule_with_no_entry_stops_the_plan(small, tmp_path):
    """A rule that runs a script and has no entry is named, not silently left uncounted."""
    root = _workflow_copy(tmp_path / "wf")
    with open(root / "Snakefile", "a", encoding="utf-8") as f:
        f.write('\n\nuse rule lcae_stage1 as lcae_stage1_again with:\n    output:\n'
                '        f"{R}/again/{{model}}/{{ckpt}}.parquet",\n\n\n'
                'rule again:\n    input:\n        f"{R}/again/api/final.parquet",\n')
    with pytest.raises(PlanError, match="lcae_stage1_again"):
        make_plan(small, "again", root=root)


def test_an_unknown_target_is_named(small, capsys):
    from selfknow.cli import main

    assert main(["plan", str(small), "no_such_rule"]) == 2
    assert "no_such_rule" in capsys.readouterr().err
