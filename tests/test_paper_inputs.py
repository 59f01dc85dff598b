"""Every target of the paper config from what a user can obtain (issue 26): each file a job of
`all_tables` reads is made by a rule of the DAG, downloaded by the code from the hub at a pinned
revision, or a `path:` the README tells the user how to obtain."""
from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

from conftest import REPO
from dag import dag_jobs

#: the `path:`s of the paper config a user supplies, each with the README text that documents it
DOCUMENTED_PATHS = {"data/bioasq/training14b.json": "for BioASQ, the training JSON at the path it names"}


def _dataset_specs(params) -> list[Mapping]:
    """The dataset specs (mappings with a `loader`) among a job's params, alone or in lists."""
    out = []
    for _, value in params.items():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, Mapping) and "loader" in set(v):  # keys only: config sections refuse unknown keys
                out.append(v)
    return out


def unobtainable(jobs, documented: Mapping[str, str]) -> list[str]:
    """One line per file a job reads that no job makes, no hub download provides and the
    README does not document."""
    produced = {str(f) for j in jobs for f in j.output}
    problems = [f"{j}: input {f} has no producing rule" for j in jobs for f in j.input if str(f) not in produced]
    for j in jobs:
        for spec in _dataset_specs(j.params):
            if "path" in spec:
                path = str(spec["path"]).rstrip("/")
                made = path in produced or any(p.startswith(path + "/") for p in produced)
                if not made and path not in documented:
                    problems.append(f"{j}: dataset {spec['loader']} path {path} is made by no rule and not documented")
            elif not {"hub_id", "revision"} <= set(spec):
                problems.append(f"{j}: dataset {spec['loader']} has neither a path nor a hub id and revision")
    return problems


def test_paper_all_tables_reads_only_obtainable_inputs(tmp_path):
    jobs = dag_jobs(REPO / "config" / "paper.yaml", tmp_path / "results")
    assert {"ladder_react", "ladder_table34", "items"} <= {j.rule.name for j in jobs}
    assert unobtainable(jobs, DOCUMENTED_PATHS) == []
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for path, text in DOCUMENTED_PATHS.items():
        assert text in readme, f"README no longer documents {path}"


class _Job(SimpleNamespace):
    def __str__(self) -> str:
        return self.name


def _job(name, inputs=(), outputs=(), **params):
    return _Job(name=name, input=list(inputs), output=list(outputs), params=params)


def test_a_file_nobody_makes_or_documents_is_reported():
    react = {"loader": "react", "path": "data/ladder/react"}
    jobs = [_job("made", outputs=["r/ladder/react/m/c/test.jsonl"]),
            _job("t34", inputs=["r/ladder/react/m/c/test.jsonl", "r/missing.parquet"],
                 react_specs=[react, {"loader": "react", "path": "r/ladder/react/m/c"}]),
            _job("items", spec={"loader": "bioasq", "path": "data/bioasq/training14b.json"}),
            _job("hub", spec={"loader": "mmlu", "hub_id": "cais/mmlu"})]
    problems = unobtainable(jobs, DOCUMENTED_PATHS)
    assert len(problems) == 3
    assert "input r/missing.parquet has no producing rule" in problems[0]
    assert "path data/ladder/react is made by no rule" in problems[1]
    assert "neither a path nor a hub id and revision" in problems[2]
