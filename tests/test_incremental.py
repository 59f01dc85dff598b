"""Incremental reruns (issue 7; issue 2's acceptance), read from `snakemake -n` on the tiny run.

Each test changes one thing about the completed tiny run (config/test.yaml) and checks the
exact set of jobs, by rule and wildcards, that a dry-run would run. A rule that depends on
every model, or on more of the config than it reads, when it need not, fails these tests:

- adding a model runs only that model's jobs and the aggregates over the models of the
  protocols it joins (the joint Rasch fit and what reads it, the judge audit, the tables, the
  card);
- changing a rendering-only setting (`report.decimals`) reruns only the jobs that render
  tables (figure-only jobs print no decimals), and setting it to the value it had reruns nothing;
- deleting one model's generations reruns only that model's generation jobs and the tables
  that read them.

Snakemake's rerun triggers other than mtime (params, input, code, software environment)
compare with the metadata it records in `.snakemake/` of the working directory, keyed by
output path. The tiny run ran in the repository, so the dry-runs that change the config run
there, against the tiny run's own results, with its metadata: a params change is seen, as it
would be on a user's machine (a dry-run writes nothing). Deleting files needs a copy of the
results, which has no metadata at its new path; there only the mtime and missing-output
triggers apply, which are the only ones a deletion can set off. The copy is checked to be up
to date before anything is deleted.
"""
from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, copy_results, run_snakemake
from selfknow.config import ConfigError, validate_config
from selfknow.report import tables as report_tables

TEST_CONFIG = REPO / "config" / "test.yaml"


# -- reading a dry-run -----------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """One job of a dry-run: its rule and wildcards identify it; outputs are relative to the
    results directory."""
    rule: str
    wildcards: tuple[tuple[str, str], ...]
    outputs: tuple[str, ...] = field(default=(), compare=False)

    @property
    def model(self) -> str | None:
        return dict(self.wildcards).get("model")

    @property
    def family(self) -> str | None:
        return dict(self.wildcards).get("family")

    def writes_only_under(self, *dirs: str) -> bool:
        return bool(self.outputs) and all(o.startswith(dirs) for o in self.outputs)

    def __str__(self) -> str:
        return self.rule + ("(" + ", ".join(f"{k}={v}" for k, v in self.wildcards) + ")" if self.wildcards else "")


_JOB_HEADER = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
_JOB_FIELD = re.compile(r"^\s+(\w+): (.*)$")


def job_stats(text: str) -> Counter:
    """The "Job stats" table: jobs per rule (empty when there is nothing to do)."""
    lines = text.splitlines()
    if "Job stats:" not in lines:
        return Counter()
    i = lines.index("Job stats:") + 3          # past the header and its dashes
    stats = Counter()
    while not lines[i].startswith("total"):
        rule, count = lines[i].split()
        stats[rule] = int(count)
        i += 1
    assert sum(stats.values()) == int(lines[i].split()[1]), lines[i]
    return stats


def parse_dry_run(text: str, results: Path) -> set[Job]:
    """Every job a `snakemake -n` output lists, checked against its Job stats table."""
    prefix = f"{results}/"
    jobs, cur = [], None
    for line in text.splitlines():
        if m := _JOB_HEADER.match(line):
            cur = {"rule": m.group(1), "wildcards": (), "outputs": ()}
            jobs.append(cur)
        elif cur is not None and (m := _JOB_FIELD.match(line)):
            key, value = m.groups()
            if key == "wildcards":
                cur["wildcards"] = tuple(sorted(tuple(kv.split("=", 1)) for kv in value.split(", ")))
            elif key == "output":
                cur["outputs"] = tuple(o.removeprefix(prefix) for o in value.split(", "))
        elif line.strip():
            cur = None
    out = {Job(**j) for j in jobs}
    assert len(out) == len(jobs), "a job is listed twice"
    stats = job_stats(text)
    assert Counter(j.rule for j in out) == stats, f"per-job listing {Counter(j.rule for j in out)} != Job stats {stats}"
    if not out:
        assert "Nothing to be done" in text, text[-3000:]
    return out


def dry_run(configfile: Path, results: Path, *options: str) -> set[Job]:
    """The jobs `snakemake all_tables -n` would run (the target first: --configfile and
    --config take every value after them)."""
    proc = run_snakemake("all_tables", "-n", *options, "--configfile", str(configfile),
                         "--config", f"results={results}")
    return parse_dry_run(proc.stdout + proc.stderr, results)


def whole_dag(configfile: Path, results: Path) -> set[Job]:
    """Every job of the config's DAG (what a run from scratch would run)."""
    return dry_run(configfile, results, "--forceall")


def assert_jobs(got: set[Job], expected: set[Job]) -> None:
    extra = sorted(map(str, got - expected))
    missing = sorted(map(str, expected - got))
    assert not extra and not missing, (f"jobs that should not run ({len(extra)}): {extra}\n"
                                       f"jobs that should run but do not ({len(missing)}): {missing}")


# -- configs and results -----------------------------------------------------------------------

def tiny_config() -> dict:
    return yaml.safe_load(TEST_CONFIG.read_text(encoding="utf-8"))


def write_config(cfg: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_dag(tiny_run) -> set[Job]:
    return whole_dag(TEST_CONFIG, tiny_run)


@pytest.fixture(scope="module")
def tiny_is_up_to_date(tiny_run) -> Path:
    """The tiny run, checked to need nothing, so every job a test sees comes from its change."""
    assert_jobs(dry_run(TEST_CONFIG, tiny_run), set())
    return tiny_run


# -- (a) adding a model --------------------------------------------------------------------------

#: Figures 3 and 4 and Table 19 are drawn for the first persistent model only.
FIRST_PERSISTENT_MODEL_ONLY = {"persistent_figure3", "persistent_figure4", "persistent_table19"}
#: Per protocol, the jobs over all of its models (besides the persistent tables, found by output).
AGGREGATES = {
    "world": {"world_evolution_table"},
    "persistent": {"llm_judge", "judge_audit_table"},       # the judge audits the persistent models' answers
    # the cross-task and Table 32 tables record LADDER's section (its models among it) as
    # provenance, so a new session model reruns them too
    "ladder": {"ladder_tables", "ladder_appendix", "ladder_table34", "ladder_crosstask_tables", "ladder_table32"},
    # the joint Rasch fit, and Stage 2 of every examinee: its prompts carry the fit's item
    # error probabilities, which a new examinee changes
    "lcae": {"lcae_irt", "lcae_stage2", "lcae_stage3", "lcae_tables"},
    "models": {"knowledge_card", "all_tables"},              # one card row per configured model
}


def expected_after_adding(dag: set[Job], new: str, protocols: set[str]) -> set[Job]:
    rules = set().union(*(AGGREGATES[p] for p in protocols | {"models"}))

    def reruns(j: Job) -> bool:
        if j.model == new or j.family == new:
            return True
        # the persistent tables are over every model; the per-model figures (reliability
        # diagrams, `model` wildcard) of the other models are not
        if "persistent" in protocols and j.rule not in FIRST_PERSISTENT_MODEL_ONLY and j.model is None \
                and j.writes_only_under("tables/persistent/", "figures/persistent/"):
            return True
        return j.rule in rules

    return {j for j in dag if reruns(j)}


@pytest.mark.slow
def test_adding_a_world_model_to_every_protocol_runs_only_its_jobs_and_the_aggregates(tiny_is_up_to_date, tmp_path):
    tiny = tiny_is_up_to_date
    cfg = tiny_config()
    new = "wm-extra"
    cfg["world"]["families"][new] = {**cfg["world"]["families"]["wm-small"], "seed": 7}
    cfg["models"].append({"name": new, "backend": "hf", "source": "world"})
    cfg["persistent"]["models"].append(new)
    cfg["ladder"]["models"].append(new)
    cfg["lcae"]["examinee_models"].append(new)
    cfg["lcae"]["prices"][new] = [0.01, 0.02]
    config = write_config(cfg, tmp_path / "added.yaml")

    dag = whole_dag(config, tiny)
    got = dry_run(config, tiny)
    expected = expected_after_adding(dag, new, {"world", "persistent", "ladder", "lcae"})
    assert_jobs(got, expected)
    # the new model's own work, in every protocol, is there; nothing upstream is redone
    assert {"world_train", "generate_greedy", "persistent_sc", "persistent_variant", "persistent_gcm",
            "persistent_metrics", "ladder_sessions", "ladder_prompted", "ladder_score", "lcae_stage1",
            "lcae_stage2"} <= {j.rule for j in got if new in (j.model, j.family)}
    assert not {"world_generate", "items", "smollm2_convert", "lcae_sample"} & {j.rule for j in got}
    # the other models' jobs rerun only where the joint Rasch fit feeds them
    assert {j.rule for j in got if j.model not in (None, new)} == {"lcae_stage2"}


@pytest.mark.slow
def test_adding_a_path_model_to_one_protocol_reruns_only_that_protocols_aggregates(tiny_is_up_to_date, tmp_path):
    """docs/extending.md's example: a model from a local directory, with two checkpoints, as an LCAE
    examinee only. The world, persistent and LADDER jobs are untouched."""
    tiny = tiny_is_up_to_date
    cfg = tiny_config()
    new = "my-model"
    ckpts = sorted(p for p in (tiny / "world" / "models" / "wm-small").iterdir() if p.is_dir())
    cfg["models"].append({"name": new, "backend": "hf", "path": str(ckpts[-1]),
                          "checkpoints": [{"name": "early", "path": str(ckpts[0])},
                                          {"name": "late", "path": str(ckpts[-1])}]})
    cfg["lcae"]["examinee_models"].append(new)
    cfg["lcae"]["prices"][new] = [0.05, 0.1]
    config = write_config(cfg, tmp_path / "added.yaml")

    got = dry_run(config, tiny)
    assert_jobs(got, expected_after_adding(whole_dag(config, tiny), new, {"lcae"}))
    assert {(j.rule, dict(j.wildcards)["ckpt"]) for j in got if j.model == new} == {
        (r, c) for r in ("lcae_stage1", "lcae_stage2") for c in ("early", "late")}


# -- (b) a rendering-only setting --------------------------------------------------------------

@pytest.mark.slow
def test_changing_the_table_decimals_reruns_only_the_tables_and_figures(tiny_is_up_to_date, tiny_dag, tmp_path):
    tiny = tiny_is_up_to_date
    cfg = tiny_config()
    assert cfg.get("report", {}).get("decimals", 3) == 3, "the test expects the default of 3 decimals"

    # the value it had: nothing to do (the params trigger compares values, not presence)
    cfg["report"] = {"decimals": 3}
    assert_jobs(dry_run(write_config(cfg, tmp_path / "same.yaml"), tiny), set())

    cfg["report"] = {"decimals": 2}
    got = dry_run(write_config(cfg, tmp_path / "decimals.yaml"), tiny)
    # the jobs that render a table (some also draw figures); a figure-only job prints no decimals
    rendering = {j for j in tiny_dag if j.writes_only_under("tables/", "figures/")
                 and any(o.startswith("tables/") for o in j.outputs)}
    assert any(j.writes_only_under("figures/") for j in tiny_dag), "no figure-only job to leave alone"
    assert_jobs(got, rendering | {j for j in tiny_dag if j.rule == "all_tables"})
    # every paper's tables are among them (so the selection above is not vacuous)
    assert {"world_evolution_table", "judge_audit_table", "ladder_tables", "lcae_tables", "knowledge_card",
            "persistent_figure3", "persistent_table19"} <= {j.rule for j in got}
    assert any(o.startswith("tables/persistent/table1.") for j in got for o in j.outputs)


def test_report_decimals_is_validated_and_sets_the_rendered_decimals(monkeypatch):
    cfg = tiny_config()
    cfg["report"] = {"decimals": 2}
    validate_config(cfg)
    for bad in ({"decimals": -1}, {"decimals": "2"}, {"decimal": 2}):
        with pytest.raises(ConfigError, match="report"):
            validate_config({**cfg, "report": bad})
    df = pd.DataFrame({"x": [0.123456]})
    monkeypatch.setattr(report_tables, "DECIMALS", report_tables.DECIMALS)   # restored after the test
    assert "0.123 |" in report_tables.to_markdown(df)
    report_tables.set_decimals(2)
    assert "0.12 |" in report_tables.to_markdown(df) and "0.12<" in report_tables.to_html(df)
    assert "0.1235 |" in report_tables.to_markdown(df, digits=4)                # an explicit digits wins
    with pytest.raises(ValueError):
        report_tables.set_decimals(-1)


# -- (c) deleting one model's generations ------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("model", ["wm-small", "wm-base"])
def test_deleting_a_models_generations_reruns_only_its_jobs_and_the_tables(tiny_run, tiny_dag, tmp_path, model):
    copy = copy_results(tiny_run, tmp_path / "results")
    assert_jobs(dry_run(TEST_CONFIG, copy), set())          # the copy kept every mtime: up to date

    generations = copy / "generations" / model
    assert generations.is_dir(), f"the tiny run has no generations of {model}"
    shutil.rmtree(generations)
    got = dry_run(TEST_CONFIG, copy)

    # who reads generations/: the world evolution table (every world model) and the LLM judge
    # audit (the persistent models' last checkpoints)
    readers = {"world_evolution_table", "all_tables"}
    if model in tiny_config()["persistent"]["models"]:
        readers |= {"llm_judge", "judge_audit_table"}
    expected = {j for j in tiny_dag if (j.rule == "generate_greedy" and j.model == model) or j.rule in readers}
    assert_jobs(got, expected)
    assert {j for j in got if j.rule == "generate_greedy"}, "no generation job reruns"
    # the original results are untouched (the copy's files are hard links)
    assert (tiny_run / "generations" / model).is_dir()
