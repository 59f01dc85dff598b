"""The researcher's view: every report caption renders, a throwaway two-rule workflow wired
exactly as the real one (catalog -> report(...) wrappers, provenance sidecars) gives a Snakemake
HTML report that headless Chromium shows with every table and figure present and non-empty,
the real workflow's report of the tiny run shows every catalog item that config builds, and
progress bars land in the job log."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake
from selfknow.catalogs import REPORT
from selfknow.report.catalog import SHARED_CAPTIONS, TABLE_FILES, caption_text

sys.path.insert(0, str(Path(__file__).parent))
import report_check  # noqa: E402

REPORT_DIR = REPO / "workflow_report"
CATALOG = REPORT
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; installed with apt-get when missing and we are root. Outside CI a
    machine that cannot install it skips; in CI (CI=true) its absence is a failure."""
    found = report_check.find_chromium()
    if found:
        return found
    why = None
    if shutil.which("apt-get") is None:
        why = "chromium is missing and there is no apt-get to install it"
    elif os.geteuid() != 0:
        why = "chromium is missing and installing it needs root (apt-get install chromium)"
    else:
        t0 = time.perf_counter()
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                why = f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}"
                break
        print(f"\nchromium installed in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        found = report_check.find_chromium()
        if found:
            return found
        why = why or "apt-get installed chromium but no chromium binary was found"
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


# --- captions ----------------------------------------------------------------------------------

def _render_caption(key: str, config: dict, outputs: dict, wildcards: dict) -> str:
    """What Snakemake's report does with a caption: Jinja with `snakemake`, then docutils."""
    from docutils.core import publish_parts
    from jinja2 import Environment
    from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, ResourceList, Snakemake, Wildcards

    job = Snakemake(InputFiles(), OutputFiles(fromdict=outputs), Params(), Wildcards(fromdict=wildcards), 1,
                    ResourceList(), Log(), config, "rule", None)
    text = caption_text(CATALOG[key], REPORT_DIR)
    rst = Environment(trim_blocks=True, lstrip_blocks=True).from_string(text).render(snakemake=job, categories={},
                                                                                     files=[])
    return publish_parts(rst, writer="html", settings_overrides={"halt_level": 2, "report_level": 2})["body"]


def test_the_catalog_and_the_caption_files_agree():
    captions = {p.relative_to(REPORT_DIR).as_posix() for p in REPORT_DIR.rglob("*.rst")} - {"workflow.rst"}
    shared = {c for c in captions if c.startswith(f"{SHARED_CAPTIONS}/")}
    assert captions - shared == {item["caption"] for item in CATALOG.values()}
    # a shared paragraph is written once and appended to every caption that names it, and only there
    tails = [f for item in CATALOG.values() for f in item["caption_tail"]]
    assert shared == set(tails) and all(tails.count(f) > 1 for f in shared)
    for item in CATALOG.values():
        own = (REPORT_DIR / item["caption"]).read_text(encoding="utf-8")
        assert not any((REPORT_DIR / f).read_text(encoding="utf-8").strip() in own for f in shared), item["caption"]
        assert (item["caption_tail"][-1:] == [f"{SHARED_CAPTIONS}/{TABLE_FILES}.rst"]) == (item["kind"] == "table")
    for key, item in CATALOG.items():
        paper, name = key.split("/")
        assert item["category"] and item["subcategory"] and item["label"]
        if item["kind"] == "table":
            assert item["output"] == f"tables/{paper}/{name}.html" and item["output_key"] == f"{name}_html"
        else:
            assert item["output"].startswith(f"figures/{paper}/") and item["output"].endswith(".png")
    # everything the papers' target lists name is there
    expected = {f"persistent/table{i}" for i in (1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)}
    expected |= {"persistent/figure3", "lcae/table1", "lcae/table2", "lcae/table3", "lcae/item_fit", "lcae/figure2",
                 "ladder/main", "ladder/decoder", "ladder/noise_grid", "ladder/partitions", "ladder/r4",
                 "ladder/import_aggregates", "world/evolution", "judge/audit", "card/self_knowledge"}
    expected |= {f"ladder/{t}" for t in ("controls", "tiers", "prefix", "heldout", "simulators", "pooled_pairs",
                                         "answers")}
    expected |= {f"ladder/figure{i}" for i in (4, 5, 6, 7)}
    # the remaining analyses (issue #17)
    expected |= {f"ladder/{t}" for t in ("crosstask_mmlu_pro", "crosstask_bbh", "table18", "table32", "table33",
                                         "table34", "figure9", "figure11")}
    expected |= {"persistent/table7", "persistent/figure2", "persistent/figure4", "lcae/table1_squared"}
    assert expected <= set(CATALOG)


@pytest.mark.parametrize("configfile", ["config.yaml", "config/paper.yaml"])
def test_every_caption_renders_with_its_provenance(configfile, tmp_path, monkeypatch):
    config = yaml.safe_load((REPO / configfile).read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    for key, item in CATALOG.items():
        paper, name = key.split("/")
        if item["kind"] == "table":
            outputs = {f"{name}_{ext}": f"results/tables/{paper}/{name}.{ext}" for ext in ("csv", "md", "html")}
            side = Path(f"results/tables/{paper}/{name}.json")
        else:
            png = item["output"].replace("{model}", "wm-small").replace("{dataset}", "world_qa")
            outputs = {name: f"results/{png}"}
            side = Path(f"results/{png}").with_suffix(".json")
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text(json.dumps({"schema": "selfknow.provenance/1", "config_hash": f"hash-{name}",
                                    "packages": {"numpy": "2"}, "config": {"secret_fragment": 1},
                                    "figure": {"axes": [{"series": ["summary_series"]}]}}, indent=2))
        html = _render_caption(key, config, outputs, {"model": "wm-small", "dataset": "world_qa"})
        assert f"hash-{name}" in html, key  # the sidecar is included ...
        assert "secret_fragment" not in html, key  # ... up to the config fragment
        assert "summary_series" not in html, key  # (a figure's summary follows the config)
        assert "system-message" not in html, key
        assert len(html) > 400, key
    desc = REPORT_DIR / "workflow.rst"
    from docutils.core import publish_parts
    from jinja2 import Environment

    class Job:
        pass
    Job.config = config
    rst = Environment(trim_blocks=True, lstrip_blocks=True).from_string(desc.read_text()).render(snakemake=Job)
    body = publish_parts(rst, writer="html", settings_overrides={"halt_level": 2})["html_body"]
    assert config["models"][0]["name"] in body


@pytest.mark.parametrize("configfile", ["config.yaml", "config/paper.yaml", "config/test.yaml"])
def test_captions_state_the_counts_their_tables_use(configfile, tmp_path, monkeypatch):
    """A caption's counts are those its table's job uses: Table 19's seeds are
    persistent.variance_seeds (rules: P_VAR_SEEDS), noise_grid's sessions ladder.grid_sessions'
    first sessions, LCAE Figure 2 plots no Stage-1 strategy, and Figures 3-4's colour scale is
    `auc_limits`' (from the lower of 0.5 and the lowest cell)."""
    config = yaml.safe_load((REPO / configfile).read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)

    def text(key: str) -> str:
        paper, name = key.split("/")
        kind = CATALOG[key]["kind"]
        outputs = ({f"{name}_{ext}": f"results/tables/{paper}/{name}.{ext}" for ext in ("csv", "md", "html")}
                   if kind == "table" else {name: f"results/{CATALOG[key]['output']}"})
        side = Path(next(iter(outputs.values()))).with_suffix(".json")
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text(json.dumps({"config_hash": "h", "config": {}}))
        return re.sub(r"<[^>]+>", "", _render_caption(key, config, outputs, {}))

    pc, lad, lc = config.get("persistent", {}), config.get("ladder", {}), config.get("lcae", {})
    if config.get("world"):  # rules/common.smk get_world_generations: greedy answers on world.qa_dataset
        evo = " ".join(text("world/evolution").split())
        assert f"greedy answer on every question of {config['world']['qa_dataset']} (world.qa_dataset" in evo
        assert "differ from the persistent Tables 8-9" in evo
    if pc:
        seeds = pc.get("variance_seeds", pc.get("seeds", []))
        assert f"different seeds ({', '.join(map(str, seeds))}, persistent.variance_seeds)" in text("persistent/table19")
        for f in ("figure3", "figure4"):
            assert "from the lower of chance (0.5) and the lowest cell to the higher of 1" in text(f"persistent/{f}")
    if lad:
        g = lad.get("grid_sessions", 0)
        assert (f"on the first {g} of each model's sessions" if g else "on all of each model's sessions") \
            in " ".join(text("ladder/noise_grid").split())
    if lc:
        f2 = " ".join(text("lcae/figure2").split())
        strategies = ", ".join(lc.get("strategies", []))
        assert f"(Stage 1 also ran the strategies {strategies}, which the figure does not plot)" in f2
        assert "ln 2 = 0.693" in f2


def test_a_caption_whose_sidecar_is_missing_fails_loudly(tmp_path, monkeypatch):
    from docutils.utils import SystemMessage

    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    with pytest.raises(SystemMessage, match="table1.json"):
        _render_caption("lcae/table1", config, {"table1_csv": "results/tables/lcae/table1.csv"}, {})


# --- the report in a browser -------------------------------------------------------------------

SNAKEFILE = r'''
# A throwaway workflow wired like the real one: report(...) wrappers from the catalog,
# provenance sidecars from the package, captions and the description from workflow_report/.
import tempfile
from pathlib import Path

from selfknow.catalogs import REPORT as CATALOG
from selfknow.report.catalog import SHARED_CAPTIONS, TABLE_FILES, caption_text

REPORT_DIR = Path("__REPORT_DIR__")
CAPTIONS = Path(tempfile.mkdtemp())
R = "results"

configfile: "__CONFIG__"
report: str(REPORT_DIR / "workflow.rst")


def report_item(key, path):
    item = CATALOG[key]
    caption = CAPTIONS / item["caption"].replace("/", "__")
    caption.write_text(caption_text(item, REPORT_DIR), encoding="utf-8")
    return report(path, caption=str(caption), category=item["category"],
                  subcategory=item["subcategory"], labels={"result": item["label"]})


rule all:
    input:
        f"{R}/tables/lcae/table1.html",
        f"{R}/figures/lcae/figure2.png",


rule items:
    output:
        f"{R}/lcae/items.csv",
    run:
        Path(output[0]).write_text("item_id,answer\nq1,A\nq2,B\n")


rule demo_table:
    input:
        rules.items.output[0],
    output:
        table1_csv=f"{R}/tables/lcae/table1.csv",
        table1_md=f"{R}/tables/lcae/table1.md",
        table1_json=f"{R}/tables/lcae/table1.json",
        table1_html=report_item("lcae/table1", f"{R}/tables/lcae/table1.html"),
    run:
        import pandas as pd
        from selfknow.report.provenance import config_fragment, provenance
        from selfknow.report.tables import write_table

        df = pd.DataFrame({"examinee": ["wm-small/standard", "wm-base/standard", "mean"],
                           "Baseline": [0.71, 0.64, 0.675], "IDS": [0.69, 0.60, 0.645]})
        # wider than a 1,400 px window: the page must scroll it inside its box, not cut it off
        for k in range(30):
            df[f"IDS repeat {k}"] = [0.69, 0.60, 0.645]
        marks = pd.DataFrame({"Baseline": ["", "best", ""], "IDS": ["", "best", ""]})
        models = config["lcae"]["examinee_models"][:2]
        prov = provenance(config_fragment(config, sections=["lcae"], models=models),
                          models=[m for m in config["models"] if m["name"] in models], inputs=list(input),
                          repo_dir=workflow.basedir)
        write_table(df, output.table1_csv, output.table1_md, title="Table I: LCAE per condition",
                    notes="Friedman chi2(1) = 2.00, p = 0.157 (n = 2 examinees).", marks=marks, provenance=prov)


rule demo_figure:
    input:
        rules.items.output[0],
    output:
        figure2=report_item("lcae/figure2", f"{R}/figures/lcae/figure2.png"),
    run:
        import pandas as pd
        from selfknow.report.figures import ability_lcae_ce
        from selfknow.report.provenance import config_fragment, provenance

        prov = provenance(config_fragment(config, sections=["lcae"]), inputs=list(input), repo_dir=workflow.basedir)
        df = pd.DataFrame({"label": ["wm-small/standard", "wm-base/standard", "smollm2/standard"],
                           "theta": [-0.4, 0.3, 1.1], "lcae": [0.72, 0.61, 0.48], "ce": [66.7e6, 33.3e6, 8.73e6]})
        ability_lcae_ce(df, output.figure2, title="Ability x LCAE x cost efficiency", provenance=prov)
'''


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=workdir, capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report-workflow")
    (root / "Snakefile").write_text(SNAKEFILE.replace("__REPORT_DIR__", REPORT_DIR.as_posix())
                                    .replace("__CONFIG__", (REPO / "config.yaml").as_posix()))
    _snakemake(root, "-c1", "--quiet", "all")
    _snakemake(root, "--report", "report.html")
    return root / "report.html"


@pytest.mark.slow
def test_report_shows_every_table_and_figure_in_chromium(demo_report, chromium, tmp_path):
    results, categories = report_check.report_results(demo_report)
    assert set(categories) == {CATALOG["lcae/table1"]["category"]}
    entry = next(e for p, e in results.items() if p.endswith("table1.html"))
    sidecar = json.loads((demo_report.parent / "results/tables/lcae/table1.json").read_text())
    assert sidecar["config_hash"] in entry["caption"]  # provenance in the caption
    assert "wm-small" in entry["caption"]  # config values rendered by Jinja
    shot = tmp_path / "report.png"
    t0 = time.perf_counter()
    problems = report_check.check_report(demo_report, ["table1.html", "figure2.png", CATALOG["lcae/table1"]["label"],
                                                       CATALOG["lcae/figure2"]["label"]], chromium=chromium,
                                         screenshot=shot)
    print(f"\nbrowser check of the report: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    assert problems == []
    assert shot.stat().st_size > 10_000 and not report_check.png_is_blank(shot.read_bytes())


@pytest.mark.slow
def test_report_check_catches_a_missing_result_and_a_blank_figure(demo_report, chromium, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3, 3))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    page = demo_report.read_text(encoding="utf-8")
    results, _ = report_check.report_results(demo_report)
    uri = next(e["data_uri"] for e in results.values() if e["mime_type"] == "image/png")
    blank_uri = uri.split(",")[0] + "," + base64.b64encode(buf.getvalue()).decode()
    # the wide Table I without the box that scrolls it: cut off at the right of the window
    table_uri = next(e["data_uri"] for e in results.values() if e["mime_type"] == "text/html")
    table_page = base64.b64decode(table_uri.split(",", 1)[1]).decode("utf-8")
    assert '<div class="table">' in table_page
    unboxed = table_page.replace('<div class="table">', "<div>")
    unboxed_uri = table_uri.split(",")[0] + "," + base64.b64encode(unboxed.encode("utf-8")).decode()
    tampered = tmp_path / "report.html"
    tampered.write_text(page.replace(uri, blank_uri).replace(table_uri, unboxed_uri), encoding="utf-8")
    problems = report_check.check_report(tampered, ["table1.html", "figure2.png", "table2.html"], chromium=chromium)
    assert any(p.startswith("table2.html: not in the report") for p in problems), problems
    assert any(p.endswith("figure2.png: image is blank") for p in problems), problems
    assert [p for p in problems if "table1.html" in p and "cut off at the right" in p], problems
    assert not any("table1.html" in p and "cut off" not in p for p in problems), problems


# --- the real workflow's report of the tiny run ----------------------------------------------------

#: catalog items config/test.yaml does not build: it names no released LADDER sessions to import
NOT_IN_TINY = {"ladder/import_aggregates"}


def _output_pattern(item: dict) -> re.Pattern:
    """The catalog output path (under `results`) as a regex on full paths; wildcards match a name."""
    return re.compile(r"(^|/)" + re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(item["output"])) + "$")


def _catalog_keys(paths) -> set[str]:
    paths = list(paths)
    return {k for k, item in CATALOG.items() if any(_output_pattern(item).search(p) for p in paths)}


def test_output_patterns_tell_the_papers_tables_apart():
    assert _catalog_keys(["/r/tables/persistent/table1.html"]) == {"persistent/table1"}
    assert _catalog_keys(["/r/tables/persistent/table11.html", "/r/tables/lcae/table1.html"]) == \
        {"persistent/table11", "lcae/table1"}
    assert _catalog_keys(["/r/figures/persistent/reliability/wm-small/world_qa.png"]) == {"persistent/reliability"}
    assert _catalog_keys(["/r/tables/persistent/table1.csv", "/r/xtables/lcae/table1.html"]) == set()


def _tiny_args(results: Path) -> list[str]:
    # the target first: --configfile and --config each take every value that follows them
    return ["all_tables", "--configfile", "config/test.yaml", "--config", f"results={results}"]


@pytest.fixture(scope="module")
def tiny_report(tiny_run, tmp_path_factory) -> Path:
    """`snakemake --report` of the tiny run: builds no job, only reads the results."""
    report = tmp_path_factory.mktemp("tiny-report") / "report.html"
    t0 = time.perf_counter()
    run_snakemake("--report", str(report), *_tiny_args(tiny_run))
    print(f"\nreport of the tiny run: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return report


@pytest.mark.slow
def test_the_tiny_runs_report_shows_every_table_and_figure_it_built(tiny_run, tiny_report, chromium, tmp_path):
    # what the DAG of this config declares (`--summary` lists every output file of every job)
    summary = run_snakemake("--summary", *_tiny_args(tiny_run)).stdout
    outputs = [line.split("\t")[0] for line in summary.splitlines()[1:]]
    built = _catalog_keys(outputs)
    assert built == set(CATALOG) - NOT_IN_TINY
    results, categories = report_check.report_results(tiny_report)
    # each item found by its own path (file names such as table1.html repeat across papers)
    assert _catalog_keys(results) == built
    # one entry per catalog output (a wildcard item, the reliability diagrams, has one per
    # training dataset), nothing unlisted (Figure 3's data table)
    shown = [p for p in outputs if any(_output_pattern(CATALOG[k]).search(p) for k in built)]
    assert len(shown) > len(built) and len(results) == len(shown)
    assert set(categories) == {CATALOG[k]["category"] for k in built}  # grouped by paper
    for path, entry in results.items():
        sidecar = json.loads(Path(path).with_suffix(".json").read_text(encoding="utf-8"))
        assert sidecar["config_hash"] in entry["caption"], path  # the provenance is in the caption
        assert sidecar["git"]["commit"] and sidecar["inputs"] and sidecar["packages"], path
    shot = tmp_path / "report.png"
    t0 = time.perf_counter()
    problems = report_check.check_report(tiny_report, report_check.catalog_labels(sorted(built)),
                                         chromium=chromium, screenshot=shot)
    print(f"\nbrowser check of the tiny run's report: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    assert problems == []
    assert not report_check.png_is_blank(shot.read_bytes())


# --- progress bars and the job summary land in the rule's log -----------------------------------

def test_progress_bars_child_processes_and_the_summary_reach_the_job_log(tmp_path, capfd):
    from tqdm import tqdm

    from selfknow.runlog import job_log

    log = tmp_path / "logs" / "job.log"
    with job_log(str(log), "generate") as summary:
        for _ in tqdm(range(3), desc="records", mininterval=0):
            pass
        os.write(2, b"a C-level warning\n")
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child\\n')"], check=True)
        summary.update(items=3, cache_hits=1)
    print("after the job", file=sys.stderr)
    text = log.read_text(encoding="utf-8")
    assert "\r" not in text  # each redraw of the bar is a line
    bars = [ln for ln in text.splitlines() if ln.startswith("records:")]
    assert any("3/3" in ln for ln in bars) and len(bars) >= 4
    assert "a C-level warning" in text and "from a child" in text
    assert text.rstrip().splitlines()[-1].endswith("generate done in " + text.rsplit("done in ", 1)[1].split(" s:")[0]
                                                   + " s: items=3 cache_hits=1")
    assert "after the job" in capfd.readouterr().err  # stderr is restored


def test_a_job_process_exits_without_collecting_what_it_leaves(tmp_path):
    """`job_log` freezes the heap at exit, before the interpreter's own collections; not
    during the job."""
    log = str(tmp_path / "job.log")
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
            "from selfknow.runlog import job_log\n"
            f"for job in ('one', 'two'):\n    with job_log({log!r}, job):\n        pass\n"
            "print('frozen in the job:', gc.get_freeze_count() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.splitlines() == ["frozen in the job: False", "frozen at exit: True"]


_MALLOC_PROBE = """
import ctypes
from selfknow.runlog import job_log

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

def fate(size=40 << 20):  # over glibc's largest dynamic mmap threshold (32 MiB)
    mapped = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    where = "mapped" if libc.mallinfo2().hblkhd - mapped >= size else "heap"
    libc.free(block)
    return where + (" kept" if libc.mallinfo2().keepcost >= size else " returned")

print("before:", fate())
with job_log(None, "train"):
    print("in the job:", fate())
"""


@pytest.mark.skipif(not hasattr(os, "confstr") or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""),
                    reason="glibc's malloc only")
def test_a_job_keeps_freed_memory_for_its_next_allocation_unless_the_user_tuned_malloc():
    """Inside `job_log` a 40 MiB block comes from the heap and stays there when freed (a
    training step reuses it), where glibc's defaults map and unmap it; `MALLOC_*` variables of
    the user's own switch that off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE], check=True, capture_output=True, text=True,
                         env=env).stdout
    assert out.splitlines() == ["before: mapped returned", "in the job: heap kept"]
    out = subprocess.run([sys.executable, "-c", _MALLOC_PROBE], check=True, capture_output=True, text=True,
                         env={**env, "MALLOC_ARENA_MAX": "4"}).stdout
    assert out.splitlines() == ["before: mapped returned", "in the job: mapped returned"]


def test_a_failing_job_logs_its_traceback(tmp_path):
    from selfknow.runlog import job_log

    log = tmp_path / "job.log"
    with pytest.raises(RuntimeError):
        with job_log(str(log), "train"):
            raise RuntimeError("out of memory")
    text = log.read_text()
    assert "train failed after" in text and "RuntimeError: out of memory" in text
