"""Each paper's catalog (`protocols/<paper>/catalog.py`) is the one list of its methods and
tables: the report catalog, the rules' targets and the table rows agree with it, and each of
docs/extending.md's recipes (a persistent method, a persistent table, a LADDER table, an LCAE
table) edits only the files it names: applied to a copy of the workflow, its builder gives
hand-computed rows, its rule runs on a copy of the tiny run, and its paper's `*-eval` command
agrees with that rule."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, copy_results
from test_incremental import job_stats
from test_lcae_eval import lcae_eval_args
from selfknow.config import load_config
from selfknow.catalogs import CATALOGS, REPORT, table_files
from selfknow.report.catalog import Catalog, Table, buildable, by_name, call_by_name, caption_text, needs, resolve
from selfknow.protocols.ladder import catalog as LC
from selfknow.protocols.ladder.jobs import LEVELS
from selfknow.protocols.ladder.records import REQUIRED_COLUMNS
from selfknow.protocols.lcae import catalog as AC
from selfknow.protocols.persistent import catalog as PC
from selfknow.protocols.persistent.methods import MethodInputs
from selfknow.protocols.persistent.tables import METRIC_LABELS, SHORT, table_rows
from selfknow.protocols.persistent.variants import TABLE_VARIANTS, VARIANTS
from selfknow.records import write_record_table
from selfknow.stats.persistent.contrast import METRICS

PAPERS = {"persistent": PC.TABLES, "ladder": LC.TABLES, "lcae": AC.TABLES}
#: the report catalog's output of an entry with wildcards (one figure per model and dataset)
WILDCARD_OUTPUTS = {(c.paper, t.name): t.output for c in CATALOGS for t in c.tables if t.output}


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda c: c.paper)
def test_every_entry_names_a_builder_a_title_and_its_place_in_the_report(catalog):
    """An entry is the one declaration of its table: the builder it names exists, and so does
    its caption's text (the provenance block follows from the entry)."""
    for t in catalog.tables:
        assert callable(t.build()), t.name
        assert t.subcategory and t.label, t.name
        assert t.title, t.name
        caption = REPO / "workflow_report" / catalog.paper / f"{t.name}.rst"
        assert caption.is_file(), caption
        text = caption_text(REPORT[f"{catalog.paper}/{t.name}"], REPO / "workflow_report")
        ref = f"snakemake.output.{t.name}" if t.figure else f"snakemake.output.{t.name}_csv"
        assert text.count(ref) == 2 and text.count("Provenance:") == 1, t.name


def test_a_builder_gets_what_it_names():
    def builder(sessions, main, png="x"):
        return sessions, main, png
    assert call_by_name(builder, {"sessions": 1, "main": 2, "other": 3}) == (1, 2, "x")
    with pytest.raises(TypeError, match="needs \\['main'\\]"):
        call_by_name(builder, {"sessions": 1})


def test_a_catalogs_targets_are_its_buildable_entries_files():
    """`Catalog.targets`: a table's CSV and Markdown, a figure's PNG (and its data table's), one
    per wildcard mapping where its output has wildcards; an entry whose needs the config does
    not meet is not built, nor any of a paper the config does not run."""
    cat = Catalog("p", "P", (
        Table("t1", "m:f"), Table("t2", "m:f", needs=needs("x")),
        Table("fig", "m:f", figure=True), Table("plain", "m:f", figure=True, data_table=False),
        Table("rel", "m:f", figure=True, data_table=False, output="figures/p/rel/{model}/{dataset}.png")),
        runs=lambda config: "p" in config, config_has=lambda config: set(config["p"]),
        wildcards=lambda config: [{"model": m, "dataset": d} for m in ("a", "b") for d in ("u",)])
    assert cat.targets({"p": []}) == [
        "tables/p/t1.csv", "tables/p/t1.md", "tables/p/fig.csv", "tables/p/fig.md", "figures/p/fig.png",
        "figures/p/plain.png", "figures/p/rel/a/u.png", "figures/p/rel/b/u.png"]
    assert cat.targets({"p": ["x"]})[2:4] == ["tables/p/t2.csv", "tables/p/t2.md"]
    assert cat.targets({"q": ["x"]}) == []  # a config that does not run the paper builds none of it


def test_one_driver_writes_a_papers_entries_with_one_note_convention(tmp_path):
    """`write_entries`: a builder takes what it names (and a table built before it) and returns
    a `Built`, whose notes are paragraphs after the entry's own; a figure's builder also takes
    its `png` and formatted `title`, and its data table is written where the entry has one."""
    from selfknow.report.tables import Built, entry_notes, write_entries

    assert entry_notes("Entry.", ("One.", "", "Two.")) == "Entry.\n\nOne.\n\nTwo."
    assert entry_notes("", ("One.",)) == "One." and entry_notes("Entry.") == "Entry."
    with pytest.raises(TypeError, match="tuple of paragraphs"):
        Built(pd.DataFrame(), notes="One string.")
    mod = tmp_path / "recipe_builders.py"
    mod.write_text("import pandas as pd\n"
                   "from pathlib import Path\n"
                   "from selfknow.report.tables import Built\n"
                   "def first(x):\n    return Built(pd.DataFrame({'x': [x]}), ('Drawn.',))\n"
                   "def second(first, y):\n    return Built(first.assign(y=y), ('Para.', 'More.'), digits=1)\n"
                   "def fig(second, png, title):\n    Path(png).write_text(title)\n"
                   "    return Built(second.assign(z=0.25))\n")
    sys.path.insert(0, str(tmp_path))
    try:
        entries = [Table("first", "recipe_builders:first", "First {what}", "Entry."),
                   Table("second", "recipe_builders:second", "Second"),
                   Table("fig", "recipe_builders:fig", "Figure of {what}", figure=True)]
        outputs = {f"{n}_{e}": str(tmp_path / f"{n}.{e}") for n in ("first", "second", "fig") for e in ("csv", "md")}
        built = write_entries(entries, {"x": 1, "y": 2.25, "what": "x"}, {**outputs, "fig": str(tmp_path / "f.png")})
    finally:
        sys.path.remove(str(tmp_path))
    assert pd.read_csv(tmp_path / "second.csv").to_dict("records") == [{"x": 1, "y": 2.25}]
    assert (tmp_path / "first.md").read_text().startswith("### First x\n")
    assert (tmp_path / "first.md").read_text().endswith("\nEntry.\n\nDrawn.\n")
    assert (tmp_path / "second.md").read_text().endswith("| 1 | 2.2 |\n\nPara.\n\nMore.\n")
    assert (tmp_path / "f.png").read_text() == "Figure of x"
    assert pd.read_csv(tmp_path / "fig.csv").to_dict("records") == [{"x": 1, "y": 2.25, "z": 0.25}]
    assert list(built) == ["first", "second", "fig"] and built["second"].digits == 1
    (tmp_path / "legacy_builders.py").write_text("import pandas as pd\ndef bare():\n    return pd.DataFrame({'x': [1]})\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(TypeError, match=r"legacy_builders:bare \(catalog entry 'bare'\) returned DataFrame, not Built"):
            write_entries([Table("bare", "legacy_builders:bare", "Bare")], {}, {"bare_csv": str(tmp_path / "b.csv"),
                                                                             "bare_md": str(tmp_path / "b.md")})
    finally:
        sys.path.remove(str(tmp_path))
    assert not (tmp_path / "b.csv").exists()


def test_every_persistent_method_is_one_catalog_entry_and_every_row_names_one():
    names = [m.name for m in PC.METHODS]
    assert len(names) == len(set(names))
    fields = set(MethodInputs.__dataclass_fields__)
    for m in PC.METHODS:
        if m.needs_model:
            assert m.job in VARIANTS or m.job in PC.GCM_JOBS, m
            assert not m.inputs, m
        else:
            assert callable(resolve(m.confidences)) and m.job is None and set(m.inputs) <= fields, m
    # each (job, role) is read by exactly one method; every table variant has its method
    assert len({(m.job, m.role) for m in PC.METHODS if m.job}) == sum(1 for m in PC.METHODS if m.job)
    assert {PC.trained_method(v) for v in TABLE_VARIANTS} <= set(names)
    shown = set()
    for t in PC.TABLES:
        if isinstance(t.layout, PC.MethodTable):
            for b in t.layout.blocks:
                for r in b.rows:
                    for g in PC.GCM_METHODS if "{gcm}" in PC.row_method(r) else (None,):
                        shown.add(PC.row_label(r, g)[0])
    assert shown <= set(names)
    assert set(names) - shown == set(), "a catalogued method no table shows"


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_the_report_catalog_lists_exactly_the_papers_catalog(paper):
    tables = by_name(PAPERS[paper])  # also: no name twice
    listed = {k.split("/", 1)[1]: v for k, v in REPORT.items() if k.startswith(f"{paper}/")}
    assert set(listed) == set(tables)
    for name, t in tables.items():
        item = listed[name]
        assert item["kind"] == ("figure" if t.figure else "table"), name
        want = WILDCARD_OUTPUTS.get((paper, name),
                                    f"figures/{paper}/{name}.png" if t.figure else f"tables/{paper}/{name}.html")
        assert item["output"] == want, name
        assert item["output_key"] == (name if t.figure else f"{name}_html"), name


def catalog_targets(cfg: dict) -> set[str]:
    """The tables (CSV) and figures (PNG), relative to `results`, that the catalogs say `cfg` builds."""
    out: set[str] = set()

    def add(paper: str, tables: list[Table]) -> None:
        for t in tables:
            if t.writes_table:
                out.add(f"tables/{paper}/{t.name}.csv")
            if t.figure and (paper, t.name) not in WILDCARD_OUTPUTS:
                out.add(f"figures/{paper}/{t.name}.png")
        for t in tables:
            if (paper, t.name) in WILDCARD_OUTPUTS:
                pc = cfg["persistent"]
                out.update(WILDCARD_OUTPUTS[(paper, t.name)].format(model=m, dataset=d)
                           for m in pc["models"] for d in pc["datasets"])

    if "persistent" in cfg and cfg["persistent"]["models"]:
        pc = cfg["persistent"]
        unmet = {PC.SECOND: len(pc["datasets"]) < 2, PC.TRANSFER_SET: "transfer_dataset" not in pc,
                 PC.GCM: "gcm_model" not in pc}
        add("persistent", [t for t in PC.TABLES if not any(unmet[w] for w in t.needs)])
    add("ladder", buildable(LC.TABLES, LC.config_has(cfg)))
    if "lcae" in cfg:
        add("lcae", list(AC.TABLES))
    return out


@pytest.mark.parametrize("configfile", ["config.yaml", "config/test.yaml", "config/paper.yaml"])
def test_the_rules_build_exactly_the_catalogs_tables(configfile, tmp_path):
    """Every paper table and figure in the DAG of `all_tables` (as for an empty results
    directory) is one the catalogs list for this config, and every one they list is there."""
    from dag import dag_jobs

    results = tmp_path / "results"
    built = set()
    for job in dag_jobs(REPO / configfile, results, forceall=True):
        for f in job.output:
            rel = Path(f).relative_to(results).as_posix()
            if re.fullmatch(r"(tables/(persistent|ladder|lcae)/[^/]+\.csv|figures/(persistent|ladder|lcae)/.+\.png)", rel):
                built.add(rel)
    cfg = load_config(REPO / configfile)
    assert built == catalog_targets(cfg)
    # `all_tables` takes its targets from the catalogs' one driver
    driven = set(table_files(cfg))
    assert {f for f in driven if f.split("/")[1] in PAPERS and f.endswith((".csv", ".png"))} == built
    assert {f[:-3] + ".csv" for f in driven if f.endswith(".md")} == {f for f in driven if f.endswith(".csv")}


def expected_method_table(name: str, cfg: dict) -> tuple[list[str], list[str]]:
    """(columns, method labels) of a persistent method table from the catalog alone."""
    pc = cfg["persistent"]
    models, datasets, transfer = pc["models"], pc["datasets"], pc.get("transfer_dataset", "")
    gcm = "gcm" if "gcm_adapter" in pc else "gcm_trained"
    rows = table_rows(name, models, datasets, transfer, gcm_of=lambda key: gcm)
    layout = PC.TABLE[name].layout
    metrics = ([f"{m} {METRIC_LABELS[k]}" for m in models for k in SHORT] if layout.columns == "wide"
               else [METRIC_LABELS[k] for k in METRICS])
    return list(dict.fromkeys(k for r in rows for k in r.labels)) + metrics, [r.labels["method"] for r in rows]


def test_a_tables_rows_and_columns_come_from_the_catalog():
    """The expectation the tiny run is checked against (tests/test_workflow.py), on two
    models and two datasets: Table 14 runs block, model, dataset; Table 1 one model."""
    cfg = {"persistent": {"models": ["A", "B"], "datasets": ["d1", "d2"], "transfer_dataset": "t"}}
    cols, labels = expected_method_table("table1", cfg)
    assert cols[:2] == ["dataset", "method"] and cols[2:5] == ["A Δ0b", "A contrast AUC", "A full AUC"]
    table1 = [PC.row_label(r)[1] for b in PC.TABLE["table1"].layout.blocks for r in b.rows]
    assert table1[:2] == ["End-correct baseline", "Self-consistency"] and table1[-1] == "Oracle training"
    assert labels == table1 * 2
    cols, labels = expected_method_table("table14", cfg)
    assert cols[:3] == ["setting", "model", "method"] and len(cols) == 3 + len(METRICS)
    assert labels[:5] == ["Multi-ckpt, n_cand=2", "Multi-ckpt, n_cand=1", "Single-ckpt, n_cand=2",
                          "Single-ckpt, n_cand=1", "Multi-ckpt, n_cand=2"]
    _, labels = expected_method_table("table17", cfg)
    assert labels[:3] == ["GCM (trained here)", "⌞ Post-hoc", "Oracle training"]


# ----------------------------------------------------------------------------------------------
# docs/extending.md: a persistent confidence method
# ----------------------------------------------------------------------------------------------
EDIT = re.compile(r"<!-- edit: (?P<path>\S+) \| (?P<how>new|append|after: .+?|before: .+?|replace: .+?) -->\n"
                  r"(?P<indent>[ ]*)```(?:python|rst)\n(?P<code>.*?)\n[ ]*```", re.S)


def recipe_edits(section: str) -> list[tuple[str, str, str]]:
    """(file, how, code) of every edit a docs/extending.md section asks for, in order."""
    return [(m["path"], m["how"], textwrap.dedent("\n".join(line[len(m["indent"]):] for line in m["code"].split("\n"))))
            for m in EDIT.finditer(section)]


def apply_edit(root: Path, path: str, how: str, code: str) -> None:
    f = root / path
    if how == "new":
        assert not f.exists(), f"{path} exists already"
        f.write_text(code + "\n", encoding="utf-8")
        return
    text = f.read_text(encoding="utf-8")
    if how == "append":
        text = text.rstrip("\n") + "\n\n\n" + code + "\n"
    elif how.startswith(("after: ", "before: ")):
        where, prefix = how.split(": ", 1)
        lines = text.split("\n")
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(prefix)) + (where == "after")
        text = "\n".join(lines[:at] + code.split("\n") + lines[at:])
    else:
        old = how[len("replace: "):]
        assert text.count(old) == 1, f"{path}: {old!r} is not there exactly once"
        text = text.replace(old, code.strip())
    f.write_text(text, encoding="utf-8")


#: runs in the copy: synthetic answers of a training and three evaluation checkpoints, the
#: metrics job's assembly and metrics, then one table's job; prints the table's CSV
TABLE_JOB = r'''
import sys
import numpy as np, pandas as pd
from pathlib import Path
from selfknow.protocols.persistent import metrics as PM, tables as T
from selfknow.protocols.persistent.inputs import EvalFiles, Evaluation

out, name = Path(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
ev, n = ["C2", "C3", "C4"], 120
ids = [f"q{i:03d}" for i in range(n)]
sc = {c: pd.DataFrame({"item_id": ids, "prediction": "a", "confidence": rng.uniform(size=n),
                       "correct": rng.uniform(size=n) < 0.3 + 0.2 * k}) for k, c in enumerate(ev)}
variants = [pd.DataFrame([{"variant": v, "seed": 0, "adapter": "multi", "scorer": c, "target": c, "dataset": "main",
                           "item_id": i, "confidence": float(x)}
                          for c in ev for i, x in zip(ids, rng.uniform(size=n))]) for v in ("nonoracle_multi", "oracle_multi")]
train = {"C1": pd.DataFrame({"confidence": rng.uniform(size=n), "correct": rng.uniform(size=n) < 0.3})}
items, y, methods = PM.assemble_methods(sc, ev, train_sc=train, variant_frames=variants)
points, reps, _ = PM.compute_metrics(y, methods, min_contrast=5, n_boot=20, n_boot_ece=0, seed=1)
paths = T.metrics_paths(str(out), "M", "d", "main")
for p in paths.values():
    Path(p).parent.mkdir(parents=True, exist_ok=True)
points.to_parquet(paths["metrics"])
np.savez(paths["replicates"], **reps)
PM.contrast_size_frame(y, ev, 5).to_parquet(paths["contrast"])
pd.DataFrame([{"judge": "exact match"}]).to_csv(out / "judge.csv", index=False)
files = {Evaluation("M", "d", "main"): EvalFiles(paths["metrics"], paths["replicates"], paths["contrast"],
                                                 str(out / "judge.csv"))}
T.table_job(name, files, ["M"], ["d"], "", str(out / f"{name}.csv"), str(out / f"{name}.md"),
            min_contrast=5, min_contrast_transfer=5)
print((out / f"{name}.csv").read_text(encoding="utf-8"))
'''


def run_in(copy: Path, *args: str, timeout: float = 900) -> str:
    """`python ARGS` in a copy of the workflow, with the copy's package; its output (stdout, then
    stderr), or a failure with the tail of both."""
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"python {' '.join(args)[:200]}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def table_csv(copy: Path, out: Path, name: str = "table1") -> str:
    return run_in(copy, "-c", TABLE_JOB, str(out), name, timeout=300)


#: a copy of the workflow: the package and everything a run of the tiny config reads
WORKFLOW = ("Snakefile", "rules", "scripts", "schemas", "workflow_report", "envs", "config", "config.yaml", "src")


def recipe_copy(tmp_path: Path, heading: str) -> tuple[Path, list[tuple[str, str, str]]]:
    """A copy of the workflow and the edits of a docs/extending.md section."""
    doc = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    section = doc.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    copy = tmp_path / "repo"
    copy.mkdir()
    for part in WORKFLOW:
        if (REPO / part).is_dir():
            shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / part, copy / part)
    return copy, recipe_edits(section)


def test_the_extending_recipe_adds_a_method_to_table_1(tmp_path):
    copy, edits = recipe_copy(tmp_path, "A persistent confidence method")
    assert len(edits) == 3 and {p for p, _, _ in edits} == {"src/selfknow/protocols/persistent/methods.py",
                                                            "src/selfknow/protocols/persistent/catalog.py"}
    before = table_csv(copy, tmp_path / "before")
    assert "Constant 0.5" not in before
    for path, how, code in edits:
        apply_edit(copy, path, how, code)
    changed = {p.relative_to(copy).as_posix() for p in copy.rglob("*.py")
               if p.read_bytes() != (REPO / p.relative_to(copy)).read_bytes()}
    assert changed == {p for p, _, _ in edits}
    after = table_csv(copy, tmp_path / "after")
    header, *rows = [line.split(",") for line in after.strip().splitlines()]
    assert [r[header.index("method")] for r in rows] == ["End-correct baseline", "Self-consistency", "Constant 0.5",
                                                        "Non-oracle training", "Oracle training"]
    half = rows[2]
    # a constant confidence ranks no answer above another: every AUC is 0.5
    assert float(half[header.index("M full AUC")]) == pytest.approx(0.5)
    assert float(half[header.index("M contrast AUC")]) == pytest.approx(0.5)
    # the other rows are as before the edit
    assert [r for r in rows if r[header.index("method")] != "Constant 0.5"] == \
        [line.split(",") for line in before.strip().splitlines()[1:]]


def test_the_extending_recipe_adds_a_persistent_table(tmp_path):
    """docs/extending.md's table example, applied to a copy, is one entry and one caption: a
    table the table job writes with the rows and columns of its catalog entry, and a report
    item with its caption and provenance (its rule follows from the catalog, checked above)."""
    copy, edits = recipe_copy(tmp_path, "A persistent table")
    assert [p for p, _, _ in edits] == ["src/selfknow/protocols/persistent/catalog.py",
                                        "workflow_report/persistent/table20.rst"]
    for path, how, code in edits:
        apply_edit(copy, path, how, code)
    code = ("import json, sys\nfrom selfknow.catalogs import REPORT\n"
            "from selfknow.report.catalog import caption_text\n"
            "print(json.dumps([REPORT['persistent/table20'], caption_text(REPORT['persistent/table20'], sys.argv[1])]))")
    item, caption = json.loads(run_in(copy, "-c", code, str(copy / "workflow_report"), timeout=300))
    assert item["output"] == "tables/persistent/table20.html" and item["category"] == PC.CATEGORY
    assert caption.startswith("Table 20: self-consistency") and "snakemake.output.table20_csv" in caption
    csv = table_csv(copy, tmp_path / "out", "table20")
    header, *rows = [line.split(",") for line in csv.strip().splitlines()]
    assert header == ["model", "dataset", "method", *(METRIC_LABELS[m] for m in METRICS)]
    assert [r[:3] for r in rows] == [["M", "d", "Self-consistency"], ["M", "d", "⌞ Post-hoc"]]


#: runs in a copy after a recipe: the new entry's report item and caption, and its builder on a
#: hand-made frame (printed as JSON records)
RECIPE_CHECK = r"""
import json, sys
import pandas as pd
from pathlib import Path
from selfknow.catalogs import REPORT
from selfknow.dag import snakemake_dag
from selfknow.report.catalog import call_by_name, caption_text
from selfknow.report.tables import Built
from selfknow.protocols.ladder.catalog import TABLE as LADDER
from selfknow.protocols.lcae.catalog import TABLE as LCAE

paper, name, report_dir = sys.argv[1:4]
entry = {"ladder": LADDER, "lcae": LCAE}[paper][name]
sessions = pd.DataFrame({"model": ["M"] * 4, "estimator": ["NoMemory", "LSA", "Global", "Unlisted"],
                         "CBF": [0.5, 0.6, 0.8, 0.9]})
stage3 = pd.DataFrame({"condition": ["baseline"] * 4, "examinee": ["a", "a", "b", "b"],
                       "theta": [1.0, 3.0, 0.0, 0.0]})
built = call_by_name(entry.build(), {"sessions": sessions, "stage3": stage3, "fit_notes": ("fit",)})
assert isinstance(built, Built), f"the builder returned {type(built).__name__}, not Built"
# the rules of the copy (as `snakemake -n all_tables` on the test config builds them) that write the table
root = Path(report_dir).parent
with snakemake_dag(root / "config" / "test.yaml", results=root / "results", root=root) as jobs:
    rules = sorted({j.rule.name for j in jobs if any(str(f).endswith(f"tables/{paper}/{name}.csv") for f in j.output)})
print(json.dumps({"item": REPORT[f"{paper}/{name}"], "caption": caption_text(REPORT[f"{paper}/{name}"], report_dir),
                  "job": entry.job, "rows": built.table.to_dict("records"), "notes": built.notes, "rules": rules}))
"""


@pytest.mark.parametrize("heading, paper, name, rows, notes", [
    # L2 is the mean of LSA and Global; an estimator of no level is a control
    ("A LADDER table", "ladder", "levels", [{"model": "M", "level": "L0", "CBF": 0.5},
                                            {"model": "M", "level": "L2", "CBF": 0.7},
                                            {"model": "M", "level": "control", "CBF": 0.9}], []),
    # examinee a's mean θ is 2, b's 0: mean 1, sample sd √2; the fit's paragraph is its note
    ("An LCAE table", "lcae", "theta_spread", [{"condition": "Baseline", "mean": 1.0, "std": 2 ** 0.5}], ["fit"]),
])
def test_a_table_recipe_is_one_entry_one_function_one_caption(tmp_path, heading, paper, name, rows, notes):
    """docs/extending.md's LADDER and LCAE table recipes, applied to a copy: the entry, its
    builder (returning a `Built`) and its caption are all a table needs to be built by its
    paper's table job and shown in the report with its provenance."""
    copy, edits = recipe_copy(tmp_path, heading)
    assert [(p, how) for p, how, _ in edits] == [
        (f"src/selfknow/protocols/{paper}/catalog.py", "before: " + {"ladder": '_figure("figure4",',
                                                                     "lcae": 'Table("figure2",'}[paper]),
        (f"src/selfknow/protocols/{paper}/tables.py", "append"), (f"workflow_report/{paper}/{name}.rst", "new")]
    for edit in edits:
        apply_edit(copy, *edit)
    got = json.loads(run_in(copy, "-c", RECIPE_CHECK, paper, name, str(copy / "workflow_report"), timeout=300))
    assert got["job"] == "tables" and got["item"]["output"] == f"tables/{paper}/{name}.html"
    assert got["rules"] == [f"{paper}_tables"]  # `all_tables` asks for it, its paper's tables rule writes it
    assert got["caption"].count(f"snakemake.output.{name}_csv") == 2
    assert got["notes"] == notes and len(got["rows"]) == len(rows)
    for g, want in zip(got["rows"], rows):
        assert g == pytest.approx(want) if "std" in want else g == want


# ----------------------------------------------------------------------------------------------
# the recipes on the tiny run: each new table's own rule, then its paper's `*-eval` command
# ----------------------------------------------------------------------------------------------
#: `python -c CLI ARGS` runs `selfknow ARGS`
CLI = "import sys; from selfknow.cli import main; sys.exit(main(sys.argv[1:]))"


def recipe_on_tiny_run(tiny_run: Path, tmp_path: Path, heading: str) -> tuple[Path, Path]:
    """A copy of the workflow with a docs/extending.md recipe applied, and a copy of the tiny
    run's results (hard links, mtimes kept; logs and benchmarks copied, as a job writes those in
    place)."""
    copy, edits = recipe_copy(tmp_path, heading)
    for edit in edits:
        apply_edit(copy, *edit)
    return copy, copy_results(tiny_run, tmp_path / "results", copy=("logs", "benchmarks"))


def build(copy: Path, results: Path, target: str, *options: str) -> tuple[Counter, str]:
    """Snakemake in `copy` on the tiny config for `target` (relative to `results`): the jobs it
    ran, per rule (its Job stats), and its output."""
    out = run_in(copy, "-m", "snakemake", str(results / target), "--cores", "1", *options,
                 "--configfile", "config/test.yaml", "--config", f"results={results}")
    return job_stats(out), out


def test_the_ladder_recipe_table_is_written_by_its_rule_and_from_ladder_eval_scores(tiny_run, tmp_path):
    """The LADDER recipe on the tiny run: `ladder_tables` runs (its new output is missing) and
    writes the levels table from the run's session scores. `selfknow ladder-eval` writes only
    the importer's table (`import_aggregates`) and its per-session scores; those scores through
    the driver give the same table's rows of the estimators it scores alone (L0: NoMemory, L3:
    OraclePDC)."""
    copy, results = recipe_on_tiny_run(tiny_run, tmp_path, "A LADDER table")
    ran, _ = build(copy, results, "tables/ladder/levels.csv")
    assert ran == {"ladder_tables": 1}
    table = pd.read_csv(results / "tables" / "ladder" / "levels.csv")
    scores = pd.read_parquet(results / "ladder" / "scores" / "wm-small" / "sessions.parquet")
    assert table["model"].tolist() == ["wm-small"] * len(table)
    assert set(table["level"]) == set(LEVELS.values()) | {"control"}
    cbf = table.set_index("level")["CBF"]
    assert cbf["L0"] == pytest.approx(scores.loc[scores["estimator"] == "NoMemory", "CBF"].mean())
    md = (results / "tables" / "ladder" / "levels.md").read_text(encoding="utf-8")
    assert md.startswith("### LADDER levels: mean session CBF") and md.endswith(
        "Mean session CBF of the estimators of each level (L0-L4; the controls apart).\n")

    sessions = pd.read_parquet(tiny_run / "ladder" / "sessions" / "wm-small" / "main.parquet")
    write_record_table(sessions[REQUIRED_COLUMNS], tmp_path / "sessions.csv")
    out = tmp_path / "eval"
    run_in(copy, "-c", CLI, "ladder-eval", str(tmp_path / "sessions.csv"), str(out))
    assert sorted(p.name for p in out.iterdir()) == [f"import_aggregates.{e}" for e in ("csv", "html", "md", "tex")] \
        + ["sessions.csv"]
    drive = ("import sys, pandas as pd\nfrom selfknow.protocols.ladder.catalog import TABLE\n"
             "from selfknow.report.tables import write_entries\n"
             "known = {'sessions': pd.read_csv(sys.argv[1], dtype={'session_id': str})}\n"
             "write_entries([TABLE['levels']], known, {'levels_csv': sys.argv[2] + '.csv', 'levels_md': sys.argv[2] + '.md'})")
    run_in(copy, "-c", drive, str(out / "sessions.csv"), str(tmp_path / "levels"))
    own = pd.read_csv(tmp_path / "levels.csv").set_index("level")["CBF"]
    assert own[["L0", "L3"]].tolist() == pytest.approx(cbf[["L0", "L3"]].tolist(), abs=1e-12)


def test_the_lcae_recipe_table_is_written_by_its_rule_and_by_lcae_eval(tiny_run, tmp_path):
    """The LCAE recipe on the tiny run: `lcae_tables` runs (its new output is missing) and writes
    the θ spread from Stage 3 with the fit's notes; `selfknow lcae-eval` on the run's own records
    writes the same table, byte for byte."""
    copy, results = recipe_on_tiny_run(tiny_run, tmp_path, "An LCAE table")
    ran, _ = build(copy, results, "tables/lcae/theta_spread.csv")
    assert ran == {"lcae_tables": 1}
    csv = results / "tables" / "lcae" / "theta_spread.csv"
    table = pd.read_csv(csv).set_index("condition")
    assert list(table.index) == ["Baseline", "DPR", "IDS", "IDS+DPR"]  # by the conditions' keys
    stage3 = pd.read_parquet(results / "lcae" / "stage3.parquet")
    per_examinee = stage3[stage3["condition"] == "baseline"].groupby("examinee")["theta"].mean()
    assert table.loc["Baseline"].tolist() == pytest.approx([per_examinee.mean(), per_examinee.std()])
    assert "Rasch" in csv.with_suffix(".md").read_text(encoding="utf-8")  # the fit's paragraph

    out = tmp_path / "eval"
    run_in(copy, "-c", CLI, *lcae_eval_args(tiny_run, tmp_path, out))
    assert (out / "tables" / "theta_spread.csv").read_bytes() == csv.read_bytes()


#: Table 1's rows after the method recipe, per dataset
TABLE1_WITH_HALF = ["end_correct", "sc", "constant_half", "nonoracle", "oracle"]


def test_the_method_recipe_reruns_the_metrics_and_table_1_and_persistent_eval_agrees(tiny_run, tmp_path):
    """The persistent method recipe on the tiny run. The copy's Snakemake records Table 1's jobs
    first (forced, before the edit: a copy has no metadata); the edit alone then reruns the
    metrics jobs (their code fingerprint changed) and Table 1, which gains the row. `selfknow
    export-records` and `persistent-eval` on the rerun's records give the same Table 1."""
    copy, edits = recipe_copy(tmp_path, "A persistent confidence method")
    results = copy_results(tiny_run, tmp_path / "results", copy=("logs", "benchmarks"))
    target = "tables/persistent/table1.csv"
    before, _ = build(copy, results, target, "--forcerun", "persistent_metrics")
    assert before == {"persistent_metrics": 2, "persistent_table1": 1}  # the two training datasets
    assert build(copy, results, target)[0] == {}
    for edit in edits:
        apply_edit(copy, *edit)
    ran, log = build(copy, results, target)
    assert ran == before and "Params have changed since last execution" in log
    table = pd.read_csv(results / target)
    labels = [PC.METHOD[m].label if m in PC.METHOD else "Constant 0.5" for m in TABLE1_WITH_HALF]
    assert table["method"].tolist() == labels * 2

    records, out = tmp_path / "records.csv", tmp_path / "eval"
    run_in(copy, "-c", CLI, "export-records", str(results), str(records), "--methods", ",".join(TABLE1_WITH_HALF))
    # the rerun metrics jobs computed the new method for every answer the others have
    rec = pd.read_csv(records)
    half, sc = rec[rec["method"] == "constant_half"], rec[rec["method"] == "sc"]
    assert len(half) == len(sc) > 0 and (half["confidence"] == 0.5).all()
    run_in(copy, "-c", CLI, "persistent-eval", str(records), str(out), "--config", "config/test.yaml",
           "--label", "wm-small", "--quiet")
    assert (out / "table1.csv").read_bytes() == (results / target).read_bytes()
    # a constant 0.5 is 0.25 from every 0/1 outcome: full-set Brier in the run's metric files and in persistent-eval's
    own = pd.read_csv(out / "metrics.csv")
    for d in load_config(REPO / "config" / "test.yaml")["persistent"]["datasets"]:
        for m in (pd.read_parquet(results / "persistent" / "metrics" / "wm-small" / d / "main.parquet"),
                  own[own["dataset"] == d]):
            cell = m[(m["method"] == "constant_half") & (m["metric"] == "full_brier") & (m["normaliser"] == "eq1")]
            assert cell["value"].tolist() == [0.25], d


def test_the_persistent_table_recipe_is_written_by_its_rule_and_persistent_eval_agrees(tiny_run, tmp_path):
    """The persistent table recipe on the tiny run: its new rule `persistent_table20` runs on the
    run's metric files. `persistent-eval` writes its own fixed layouts (Tables 1, 8, 11, 12), not
    the catalog's tables: on the run's records of the two methods, its Table 11 layout (all ten
    metrics, Eq. 1) has Table 20's cells."""
    copy, results = recipe_on_tiny_run(tiny_run, tmp_path, "A persistent table")
    ran, _ = build(copy, results, "tables/persistent/table20.csv")
    assert ran == {"persistent_table20": 1}
    table = pd.read_csv(results / "tables" / "persistent" / "table20.csv")
    datasets = load_config(REPO / "config" / "test.yaml")["persistent"]["datasets"]
    assert table[["model", "dataset", "method"]].values.tolist() == [
        ["wm-small", d, m] for d in datasets for m in ("Self-consistency", "⌞ Post-hoc")]

    records, out = tmp_path / "records.csv", tmp_path / "eval"
    run_in(copy, "-c", CLI, "export-records", str(results), str(records), "--methods", "sc,sc_posthoc")
    run_in(copy, "-c", CLI, "persistent-eval", str(records), str(out), "--config", "config/test.yaml", "--quiet")
    own = pd.read_csv(out / "table11.csv")
    metrics = [METRIC_LABELS[m] for m in METRICS]
    assert own["dataset"].tolist() == table["dataset"].tolist()
    np.testing.assert_array_equal(own[metrics].to_numpy(), table[metrics].to_numpy())
