"""Code is an input (issue 49): an edit to package code reruns the jobs that reach the edited
definition, and the jobs that read their outputs; nothing else (selfknow.code_inputs and the
`code` param the Snakefile gives every rule from the job function its param `job` names).

The fast tests edit a copy of the package and compare every rule's job fingerprint before and
after, computed in a fresh interpreter on the copy. The slow test builds two targets in a copy
of the repository, edits one function and reads what `snakemake -n` would run."""
from __future__ import annotations

import ast
import fnmatch
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from conftest import REPO
from test_catalog import apply_edit, recipe_copy
from test_incremental import TEST_CONFIG, parse_dry_run

from selfknow.code_inputs import PLUMBING_MODULES, PLUMBING_SYMBOLS, _edges, _parse, closure, running
from selfknow.dag import workflow_jobs
from selfknow.protocols.persistent.catalog import TABLE as PERSISTENT_TABLE

#: every rule's job ("module:function", its param `job`): those the rules name, and the
#: persistent reliability diagrams' (their rule runs the catalog entry's builder)
JOBS = sorted({m for f in (REPO / "rules").glob("*.smk")
               for m in re.findall(r'job="(selfknow[\w.]*:\w+)"', f.read_text(encoding="utf-8"))}
              | {PERSISTENT_TABLE["reliability"].builder})
P, LA, LC = "selfknow.protocols.persistent.", "selfknow.protocols.ladder.", "selfknow.protocols.lcae."
METRICS, RELIABILITY = P + "jobs:metrics_job", P + "rule_jobs:reliability"


def _copy_package(dest: Path) -> Path:
    shutil.copytree(REPO / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest / "src" / "selfknow"


def _fingerprints(src: Path) -> dict[str, str]:
    """Job -> fingerprint, with the package at `src` (a fresh interpreter)."""
    code = ("import json, sys\nfrom selfknow.code_inputs import job_fingerprint\n"
            "print(json.dumps({j: job_fingerprint(j) for j in sys.argv[1:]}))")
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", code, *JOBS], capture_output=True, text=True,
                         env=env, timeout=300, check=True)
    return json.loads(out.stdout)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} is not there once"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {j for j in before if before[j] != after[j]}


@pytest.fixture(scope="module")
def original() -> dict[str, str]:
    return _fingerprints(REPO / "src")


# the return statement of `smooth_ece` (stats/smooth_ece.py), to edit
SMOOTH_ECE_RETURN = "    return smooth_ece_width(conf, correct, weights).value\n"


def test_every_rule_names_its_job_and_runs_the_one_script():
    assert len(JOBS) > 30
    texts = {f.name: f.read_text(encoding="utf-8") for f in (REPO / "rules").glob("*.smk")}
    assert {s for t in texts.values() for s in re.findall(r'"\.\./scripts/(\w+\.py)"', t)} == {"run_job.py"}
    assert [p.name for p in (REPO / "scripts").glob("*.py")] == ["run_job.py"]


def test_an_edit_to_one_function_changes_the_jobs_that_call_it_and_no_other(original, tmp_path):
    """SmoothECE is computed by the persistent metrics job (contrast ECE) and the reliability
    job (its summary), through different modules; the beam search, the adapter training and
    the tables import the module that imports it but never call it."""
    pkg = _copy_package(tmp_path)
    assert _fingerprints(pkg.parent) == original, "a copy of the package fingerprints differently"
    _edit(pkg / "stats" / "smooth_ece.py", SMOOTH_ECE_RETURN, SMOOTH_ECE_RETURN.replace(".value", ".value * 1.0"))
    assert _changed(original, _fingerprints(pkg.parent)) == {METRICS, RELIABILITY}


def test_comments_and_docstrings_outside_definitions_change_nothing(original, tmp_path):
    pkg = _copy_package(tmp_path)
    path = pkg / "stats" / "smooth_ece.py"
    text = path.read_text(encoding="utf-8")
    doc_end = text.index('"""', 3) + 3
    path.write_text(text[:doc_end - 3] + "More words.\n" + text[doc_end - 3:] + "\n# a comment\n", encoding="utf-8")
    assert _changed(original, _fingerprints(pkg.parent)) == set()


def test_data_files_and_lazily_imported_modules_are_reached(original, tmp_path):
    """A prompt file is read beside its module (`__file__`); a backend module is imported by the
    name the registry holds as a string."""
    pkg = _copy_package(tmp_path)
    with open(pkg / "protocols" / "lcae" / "prompts" / "cot.txt", "a", encoding="utf-8") as f:
        f.write("\n")
    lcae = _changed(original, _fingerprints(pkg.parent))
    assert {LC + "jobs:stage1_job", LC + "jobs:stage2_job"} <= lcae and all(j.startswith(LC) for j in lcae)

    pkg = _copy_package(tmp_path / "second")
    _edit(pkg / "models" / "hf" / "lm.py", "        return self._calls.identity\n",
          "        return dict(self._calls.identity)\n")
    hf = _changed(original, _fingerprints(pkg.parent))
    assert {"selfknow.stages.jobs:greedy_job", P + "rule_jobs:sc", LC + "jobs:stage1_job", LA + "jobs:sessions_job"} <= hf
    assert not {"selfknow.world.generator:generate_job", LC + "jobs:irt_job", P + "rule_jobs:table",
                LA + "rule_jobs:tables_job"} & hf


#: a new module of the LCAE package: a table builder, and the statistic it calls
SPREAD = '''"""Ability spread per condition."""
import pandas as pd

from selfknow.stats.hypothesis import mean_ci


def theta_spread_table(stage3: pd.DataFrame) -> pd.DataFrame:
    return stage3.groupby("condition")["theta"].agg(["mean", "std"]).reset_index()
'''


def _add_unreached_modules(pkg: Path) -> None:
    """A new module in the LCAE package, imported at the top of the LCAE tables (which every
    LADDER, LCAE and report table job imports), and one in `report` imported as a submodule by
    `report.tables`, each used only by a new function that no job calls."""
    (pkg / "protocols" / "lcae" / "spread.py").write_text(SPREAD, encoding="utf-8")
    _edit(pkg / "protocols" / "lcae" / "tables.py", "from .catalog import TABLES\n",
          "from .catalog import TABLES\nfrom .spread import theta_spread_table\n")
    with open(pkg / "protocols" / "lcae" / "tables.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef spread(stage3):\n    return theta_spread_table(stage3)\n")
    (pkg / "report" / "spread.py").write_text(SPREAD, encoding="utf-8")
    _edit(pkg / "report" / "tables.py", "from selfknow.records import write_csv, write_text\n",
          "from selfknow.records import write_csv, write_text\n\nfrom . import spread\n")
    with open(pkg / "report" / "tables.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef spread_table(stage3):\n    return spread.theta_spread_table(stage3)\n")


def test_a_new_module_that_no_job_reaches_changes_no_fingerprint(original, tmp_path):
    """Importing a module runs its statements other than definitions: a module with none is
    imported by many jobs and reached by none, and so is in no fingerprint."""
    pkg = _copy_package(tmp_path)
    _add_unreached_modules(pkg)
    assert _changed(original, _fingerprints(pkg.parent)) == set()
    _edit(pkg / "protocols" / "lcae" / "spread.py", "\n\ndef ", "\nREGISTERED = []\nREGISTERED.append(1)\n\n\ndef ")
    assert LC + "rule_jobs:tables_job" in _changed(original, _fingerprints(pkg.parent)), \
        "a statement the import runs is in the fingerprint of the jobs that import it"


def test_a_new_module_that_a_catalog_entry_names_is_in_its_jobs_fingerprint(original, tmp_path):
    """The same module, its builder named by a new LCAE catalog entry: an edit to the builder's
    body changes the LCAE tables job, which calls it, and no other job."""
    pkg = _copy_package(tmp_path)
    _add_unreached_modules(pkg)
    _edit(pkg / "protocols" / "lcae" / "catalog.py", '    Table("figure2",',
          '    Table("theta_spread", "selfknow.protocols.lcae.spread:theta_spread_table", "Ability spread",\n'
          '          job="tables", subcategory=_GROUP, label="Ability spread"),\n    Table("figure2",')
    named = _fingerprints(pkg.parent)
    _edit(pkg / "protocols" / "lcae" / "spread.py", '["mean", "std"]', '["mean", "std", "count"]')
    assert _changed(named, _fingerprints(pkg.parent)) == {LC + "rule_jobs:tables_job"}


#: the persistent table and figure jobs: each writes its catalog entry, read from `TABLES`
TABLE_JOBS = {P + f"rule_jobs:{j}" for j in ("table", "table7", "table19", "figure2", "transfer_figure")}


@pytest.mark.parametrize("heading, reruns", [
    # the metrics job computes the new method, the reliability diagrams draw every catalog
    # method, the table jobs read the edited `TABLES` (Table 1's new row); the beam search and
    # the adapters stay
    ("A persistent confidence method", {METRICS, RELIABILITY, *TABLE_JOBS}),
    # a table needs its metrics (the catalog says which normalisation they fit) and the table
    # jobs read the catalog's `TABLES`
    ("A persistent table", {METRICS, *TABLE_JOBS}),
])
def test_the_extending_recipes_change_the_jobs_they_need(original, tmp_path, heading, reruns):
    """docs/extending.md's edits, applied to a copy, rerun what they change without `--forcerun`."""
    copy, edits = recipe_copy(tmp_path, heading)
    for edit in edits:
        apply_edit(copy, *edit)
    assert _changed(original, _fingerprints(copy / "src")) == reruns


def test_closure_of_a_job_holds_what_it_calls_and_the_runner_not_the_plumbing():
    got = closure(METRICS)
    assert {("selfknow.protocols.persistent.jobs", "metrics_job"), ("selfknow.stats.smooth_ece", "smooth_ece"),
            ("selfknow.runner", "job_arguments")} <= got
    assert not any(m.startswith(("selfknow.protocols.lcae", "selfknow.protocols.ladder", "selfknow.world"))
                   for m, _ in got)
    assert not any(m in PLUMBING_MODULES or (m, n) in PLUMBING_SYMBOLS for m, n in got)


def test_plumbing_reaches_no_code_that_computes():
    """Leaving the plumbing out of the closures hides no computation: what its definitions reach
    is the plumbing itself, the package's own import, and the standard library."""
    for module in PLUMBING_MODULES:
        for name in (None, *_parse(module).defs):
            reached = {m for m, _ in _edges((module, name))} - {module, "selfknow"}
            assert not reached, (module, name, reached)


def _edit_docstrings_and_comments(path: Path) -> bool:
    """Append a word to every docstring of `path` and a comment to every logical line; whether
    there was anything to edit."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    docs = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            c = body[0].value
            docs.add((c.lineno, len(lines[c.lineno - 1].encode()[:c.col_offset].decode())))
    edits = []                                     # (row, col, text to insert)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and tok.start in docs:
            quote = tok.string.lstrip("rRuUbBfF")
            opening = 3 if quote[:3] in ('"""', "'''") else 1
            edits.append((tok.start[0], tok.start[1] + len(tok.string) - len(quote) + opening, "Edited. "))
        elif tok.type == tokenize.NEWLINE and tok.string:
            edits.append((*tok.start, "  # an edited comment"))
    for row, col, insert in sorted(edits, reverse=True):
        lines[row - 1] = lines[row - 1][:col] + insert + lines[row - 1][col:]
    path.write_text("".join(lines), encoding="utf-8")
    return bool(edits)


def test_docstrings_and_comments_of_every_function_change_nothing(original, tmp_path):
    """Every docstring and every line of the package edited at once: no job reruns."""
    pkg = _copy_package(tmp_path)
    edited = [p for p in sorted(pkg.rglob("*.py")) if _edit_docstrings_and_comments(p)]
    assert len(edited) > 100
    smooth = (pkg / "stats" / "smooth_ece.py").read_text(encoding="utf-8")
    assert "Edited. " in smooth and SMOOTH_ECE_RETURN.rstrip("\n") + "  # an edited comment" in smooth
    assert _changed(original, _fingerprints(pkg.parent)) == set()


def test_the_package_version_and_the_job_log_rerun_nothing_the_runner_reruns_all(original, tmp_path):
    pkg = _copy_package(tmp_path)
    _edit(pkg / "__init__.py", '__version__ = "', '__version__ = "9.')
    _edit(pkg / "runlog.py", '    return {"base_loads": ', '    return {"loads": 0, "base_loads": ')
    assert _changed(original, _fingerprints(pkg.parent)) == set()
    _edit(pkg / "runner.py", "    return known\n", "    return dict(known)\n")
    assert _changed(original, _fingerprints(pkg.parent)) == set(JOBS)


def test_third_party_versions_are_recorded_in_provenance_not_fingerprinted(original, tmp_path):
    """The choice of docs/running.md: another numpy (a distribution found first on the path)
    changes no job's fingerprint, and a table's provenance records its version."""
    fake = tmp_path / "site" / "numpy-0.0.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n", encoding="utf-8")
    code = ("import json, sys\nfrom selfknow.code_inputs import job_fingerprint\n"
            "from selfknow.report.provenance import package_versions\n"
            "print(json.dumps([{j: job_fingerprint(j) for j in sys.argv[1:]}, package_versions()]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO / "src")])}
    out = subprocess.run([sys.executable, "-c", code, *JOBS], capture_output=True, text=True, env=env,
                         timeout=300, check=True)
    fingerprints, versions = json.loads(out.stdout)
    assert versions["numpy"] == "0.0.1" and "scipy" in versions and "torch" in versions
    assert fingerprints == original


def test_a_builder_called_through_its_catalog_must_be_reached_by_the_job():
    """A catalog may assemble a builder's reference from strings (its rule's job, kept out of
    the closures of jobs that read the catalog for titles); a job that calls it through the
    catalog anyway is stopped, naming itself, rather than run on code its fingerprint misses."""
    from selfknow.protocols.ladder.catalog import TABLE
    whole, split = TABLE["main"], TABLE["table34"]
    with running(LA + "rule_jobs:tables_job"):
        assert callable(whole.build())
        with pytest.raises(LookupError, match=r"job 'selfknow\.protocols\.ladder\.rule_jobs:tables_job' calls "
                                              r"'selfknow\.protocols\.ladder\.heldout:table34'"):
            split.build()
    with running(LA + "rule_jobs:table34_job"):
        assert callable(split.build())
    assert callable(split.build())                 # outside a workflow job: a command line


def test_every_job_rule_has_its_code_fingerprint():
    jobs = workflow_jobs(TEST_CONFIG, results=REPO / "results-unused")
    assert {j.rule for j in jobs if "code" not in j.params} == {"all_tables"}
    assert len({j.params["code"] for j in jobs if "code" in j.params}) > 30


# -- snakemake -n in an edited copy of the repository -------------------------------------------

WORKFLOW = ["Snakefile", "rules", "scripts", "schemas", "workflow_report", "envs", "config", "config.yaml"]


def _copy_workflow(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in WORKFLOW:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, dest / name)
    _copy_package(dest)
    return dest


def _snakemake(root: Path, results: Path, targets: list[str], *options: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, *options, "--configfile",
                           str(root / "config" / "test.yaml"), "--config", f"results={results}"],
                          cwd=root, capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_an_edited_function_reruns_its_jobs_and_what_reads_them(tmp_path):
    """Two datasets' items on the tiny config, built in a copy of the repository: one from the
    generated world, one synthetic. An edit to a function of the world generator reruns the
    world's generation (its params changed) and the world dataset's items (their input did),
    not the synthetic items; an edit to SmoothECE, which neither reaches, reruns nothing."""
    root, results = _copy_workflow(tmp_path / "repo"), tmp_path / "results"
    targets = [str(results / "items" / d / "test.parquet") for d in ("world_qa_a", "arithmetic_analogue")]
    _snakemake(root, results, targets, "--cores", "1")

    def dry_run() -> set:
        return {(j.rule, j.wildcards) for j in parse_dry_run(_snakemake(root, results, targets, "-n"), results)}

    assert dry_run() == set()
    pkg = root / "src" / "selfknow"
    _edit(pkg / "stats" / "smooth_ece.py", SMOOTH_ECE_RETURN, SMOOTH_ECE_RETURN.replace(".value", ".value * 1.0"))
    assert dry_run() == set()
    _edit(pkg / "world" / "generator.py", 'if not ln.startswith("#")]', 'if not ln.startswith(("#",))]')
    assert dry_run() == {("world_generate", ()), ("items", (("dataset", "world_qa_a"),))}


_DAG_DUMP = """
import json, os, sys
from selfknow.dag import snakemake_dag
with snakemake_dag(sys.argv[1], results=sys.argv[2]) as jobs:
    print(json.dumps([{"job": f"{j.rule.name}{sorted(j.wildcards_dict.items())}",
                       "code": j.params.get("code") if "code" in j.params.keys() else None,
                       "inputs": [os.path.abspath(f) for f in j.input],
                       "outputs": [os.path.abspath(f) for f in j.output]} for j in jobs]))
"""


def _dag(root: Path, results: Path) -> list[dict]:
    """The tiny config's whole DAG with the package at `root` (a fresh interpreter): each job
    with its code fingerprint and every input and output."""
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", _DAG_DUMP, str(root / "config" / "test.yaml"), str(results)],
                         cwd=root, capture_output=True, text=True, env=env, timeout=600, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def _rerun(before: list[dict], after: list[dict], results: Path) -> tuple[set[str], set[str]]:
    """The jobs a rerun after the change runs (those whose code changed and every job downstream
    of them), and the report's tables and figures (`selfknow.catalogs.REPORT` keys) they write."""
    from selfknow.catalogs import REPORT

    code = {j["job"]: j["code"] for j in before}
    rerun = {j["job"] for j in after if j["code"] != code[j["job"]]}
    written = {f for j in after if j["job"] in rerun for f in j["outputs"]}
    while new := {j["job"] for j in after if j["job"] not in rerun and written & set(j["inputs"])}:
        written |= {f for j in after if j["job"] in new for f in j["outputs"]}
        rerun |= new
    stems = {str(Path(f).relative_to(results).with_suffix("")) for f in written if Path(f).is_relative_to(results)}
    shown = {key for key, item in REPORT.items()
             if any(fnmatch.fnmatch(stem, re.sub(r"\{\w+\}", "*", item["output"].rsplit(".", 1)[0])) for stem in stems)}
    return rerun, shown


def test_the_dag_reruns_nothing_for_docs_and_the_version_and_the_tables_of_an_edited_statistic(tmp_path):
    """On the tiny config's DAG: every docstring and comment edited, the version bumped and two
    new modules that no job reaches imported where many jobs import rerun no job; an edit to the body of the item-fit bands (`fit_band`, which the LCAE IRT fit and the
    LCAE tables call) reruns the IRT fit, the LCAE stages that read it (2 and 3: their model calls
    answered from the cache), the LCAE tables job and the self-knowledge card (it reads the
    IRT fit's persons): exactly the LCAE tables and the card among the report's items."""
    from selfknow.protocols.lcae.catalog import TABLES as LCAE

    root, results = _copy_workflow(tmp_path / "repo"), tmp_path / "results"
    before = _dag(root, results)
    pkg = root / "src" / "selfknow"
    _add_unreached_modules(pkg)
    for path in pkg.rglob("*.py"):
        _edit_docstrings_and_comments(path)
    _edit(pkg / "__init__.py", '__version__ = "', '__version__ = "9.')
    assert _rerun(before, _dag(root, results), results) == (set(), set())
    ok = "    ok = (i >= lo) & (i <= hi) & (o >= lo) & (o <= hi)"
    _edit(pkg / "stats" / "item_fit.py", ok + "  # an edited comment\n", "    ok = (i >= lo) & (o >= lo) & (i <= hi) & (o <= hi)\n")
    jobs, shown = _rerun(before, _dag(root, results), results)
    assert {j.split("[")[0] for j in jobs} - {"all_tables"} == {"lcae_irt", "lcae_stage2", "lcae_stage3",
                                                               "lcae_tables", "knowledge_card"}
    assert shown == {f"lcae/{t.name}" for t in LCAE} | {"card/self_knowledge"}
