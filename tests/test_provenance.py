"""Provenance sidecars: hashes against hashlib, git state in a real throwaway repository and in
a plain copy, determinism of the written files, and the table writer's sidecar and HTML page."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfknow.report import provenance as pv
from selfknow.report.tables import write_table

MODELS = [
    {"name": "olmo", "backend": "hf", "hub_id": "allenai/Olmo-3-1025-7B", "api_key_env": "NOPE",
     "checkpoints": [{"name": "s141000", "revision": "stage1-step141000"},
                     {"name": "s283000", "revision": "stage1-step283000"}]},
    {"name": "gpt", "backend": "openai", "base_url": "http://localhost:8000/v1", "model": "gpt-oss-120b",
     "api_key": "sk-secret"},
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
                          ).stdout.strip()


def test_config_hash_is_sha256_of_canonical_json_and_ignores_key_order():
    a = {"lcae": {"n_items": 100, "strategies": ["standard", "cot"]}, "seed": 42}
    b = {"seed": 42, "lcae": {"strategies": ["standard", "cot"], "n_items": 100}}
    expected = hashlib.sha256(b'{"lcae":{"n_items":100,"strategies":["standard","cot"]},"seed":42}').hexdigest()
    assert pv.config_sha256(a) == pv.config_sha256(b) == expected
    assert pv.config_sha256({**a, "seed": 43}) != expected
    # the short hash is the one per-item records carry
    from selfknow.config import config_hash
    assert pv.provenance(a, repo_dir="/nonexistent")["config_hash"] == config_hash(a)


def test_file_hash_reads_in_chunks_and_matches_hashlib(tmp_path):
    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 123)  # spans several 1 MiB chunks
    f = tmp_path / "items.parquet"
    f.write_bytes(data)
    assert pv.file_sha256(f) == hashlib.sha256(data).hexdigest()
    assert pv.path_sha256(f) == hashlib.sha256(data).hexdigest()
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        pv.path_sha256(tmp_path / "missing.parquet")


def test_directory_fingerprint_sees_names_small_contents_and_large_file_ends(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"n_layer": 2}')
    big = bytearray(np.random.default_rng(1).bytes(pv.SMALL_FILE_BYTES + 5 * pv.SAMPLE_BYTES))
    (d / "model.safetensors").write_bytes(bytes(big))
    h0 = pv.dir_sha256(d)
    (d / ".snakemake_timestamp").write_text("x")  # hidden files are not content
    (d / ".tmp").mkdir()
    (d / ".tmp" / "partial").write_text("y")
    assert pv.dir_sha256(d) == h0

    (d / "config.json").write_text('{"n_layer": 3}')
    h1 = pv.dir_sha256(d)
    assert h1 != h0
    big[10] ^= 0xFF  # the head of the large file
    (d / "model.safetensors").write_bytes(bytes(big))
    h2 = pv.dir_sha256(d)
    assert h2 != h1
    big[-10] ^= 0xFF  # the tail
    (d / "model.safetensors").write_bytes(bytes(big))
    h3 = pv.dir_sha256(d)
    assert h3 != h2
    (d / "model.safetensors").rename(d / "weights.safetensors")
    assert pv.dir_sha256(d) != h3


@pytest.mark.skipif(shutil.which("git") is None, reason="no git binary")
def test_git_state_in_a_checkout_and_in_a_plain_copy(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert pv.git_state(repo) == {"commit": head, "dirty": False}
    (repo / "scratch.txt").write_text("untracked files do not change the code\n")
    assert pv.git_state(repo) == {"commit": head, "dirty": False}
    (repo / "code.py").write_text("x = 2\n")
    assert pv.git_state(repo) == {"commit": head, "dirty": True}

    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    assert pv.git_state(copy) == {"commit": "unknown", "dirty": None}
    assert pv.git_state(tmp_path / "does-not-exist") == {"commit": "unknown", "dirty": None}


def test_package_versions_come_from_the_installed_distributions():
    v = pv.package_versions()
    assert v["numpy"] == np.__version__
    assert v["pandas"] == pd.__version__
    assert set(pv.PACKAGES) <= set(v) and "python" in v
    assert pv.package_versions(["no-such-distribution-xyz"])["no-such-distribution-xyz"] is None


def test_model_records_keep_revisions_fingerprint_local_checkpoints_and_drop_secrets(tmp_path):
    ck = tmp_path / "wm" / "step00300"
    ck.mkdir(parents=True)
    (ck / "config.json").write_text("{}")
    local = {"name": "wm", "backend": "hf", "path": str(tmp_path / "wm"),
             "checkpoints": [{"name": "step00300", "path": str(ck)}, {"name": "step00600", "path": str(tmp_path / "no")}]}
    recs = [pv.model_record(m) for m in [*MODELS, local]]
    assert [c["revision"] for c in recs[0]["checkpoints"]] == ["stage1-step141000", "stage1-step283000"]
    assert recs[0]["hub_id"] == "allenai/Olmo-3-1025-7B"
    assert "api_key" not in json.dumps(recs) and "sk-secret" not in json.dumps(recs)
    assert recs[1]["model"] == "gpt-oss-120b"
    assert recs[2]["checkpoints"][0]["fingerprint"] == pv.dir_sha256(ck)
    assert "fingerprint" not in recs[2]["checkpoints"][1]  # not built yet: nothing to hash
    with pytest.raises(ValueError, match="needs 'name'"):
        pv.model_record({"backend": "hf"})


def test_provenance_is_deterministic_and_the_sidecar_rewrites_identically(tmp_path):
    items = tmp_path / "items.parquet"
    items.write_bytes(b"item sample")
    records = tmp_path / "stage3.parquet"
    records.write_bytes(b"records")
    frag = {"lcae": {"n_items": 100}, "seed": 42}
    p1 = pv.provenance(frag, models=MODELS, inputs=[str(records), str(items)], repo_dir=tmp_path)
    p2 = pv.provenance(frag, models=MODELS, inputs=[str(items), str(records), str(items)], repo_dir=tmp_path)
    assert p1 == p2
    assert list(p1["inputs"]) == sorted([str(items), str(records)])
    assert p1["inputs"][str(items)] == hashlib.sha256(b"item sample").hexdigest()
    assert not any("time" in k or "created" in k for k in p1)
    side = pv.write_sidecar(p1, tmp_path / "tables" / "table1.csv")
    assert side == tmp_path / "tables" / "table1.json"
    first = side.read_bytes()
    pv.write_sidecar(p2, tmp_path / "tables" / "table1.csv")
    assert side.read_bytes() == first
    back = json.loads(first)
    assert back["config_sha256"] == pv.config_sha256(frag) and back["config"] == frag
    # the summary (what captions show) comes before the config fragment
    text = first.decode()
    assert text.index('"packages"') < text.index('"config":')
    # a changed input changes the record
    items.write_bytes(b"another sample")
    assert pv.provenance(frag, models=MODELS, inputs=[str(items)], repo_dir=tmp_path)["inputs"][str(items)] != \
        p1["inputs"][str(items)]


def test_config_fragment_selects_sections_models_and_datasets():
    cfg = {"seed": 42, "models": MODELS, "datasets": {"tqa": {"loader": "triviaqa"}, "jep": {"loader": "jeopardy"}},
           "lcae": {"n_items": 100}, "ladder": {"n_sessions": 50}}
    frag = pv.config_fragment(cfg, sections=["lcae"], models=["olmo"], datasets=["tqa"])
    assert frag == {"seed": 42, "lcae": {"n_items": 100}, "models": [MODELS[0]], "datasets": {"tqa": {"loader": "triviaqa"}}}
    with pytest.raises(KeyError, match="persistent"):
        pv.config_fragment(cfg, sections=["persistent"])
    with pytest.raises(KeyError, match="nope"):
        pv.config_fragment(cfg, models=["nope"])


def test_write_sidecars_covers_tables_and_figures_only(tmp_path):
    outs = [tmp_path / "t1.csv", tmp_path / "t1.md", tmp_path / "t1.html", tmp_path / "f2.png"]
    written = pv.write_sidecars({"config_hash": "x"}, outs)
    assert written == [tmp_path / "t1.json", tmp_path / "f2.json"]
    # a figure and the CSV of its data share one sidecar
    assert pv.write_sidecars({"config_hash": "y"}, [tmp_path / "f3.csv", tmp_path / "f3.png"]) == [tmp_path / "f3.json"]


def test_write_table_with_provenance_writes_every_rendering_and_the_sidecar(tmp_path):
    df = pd.DataFrame({"method": ["SC", "oracle", "post_hoc"], "auc": [0.71, 0.76, 0.75], "n": [500, 500, 500]})
    marks = pd.DataFrame({"auc": ["", "best", "tie"]})
    prov = pv.provenance({"persistent": {"bootstrap_replicates": 10000}}, models=MODELS[:1], repo_dir=tmp_path)
    csv, md = tmp_path / "persistent" / "table1.csv", tmp_path / "persistent" / "table1.md"
    write_table(df, csv, md, title="Table 1", notes="first note\n\nsecond <note>", marks=marks, provenance=prov)
    assert pd.read_csv(csv).equals(df)
    assert "**0.760**" in md.read_text() and "<u>0.750</u>" in md.read_text()
    tex = md.with_suffix(".tex").read_text()
    assert r"\textbf{0.760}" in tex and r"\underline{0.750}" in tex
    page = md.with_suffix(".html").read_text()
    assert "<strong>0.760</strong>" in page and "<u>0.750</u>" in page
    assert page.count("<tr>") == 1 + len(df)  # header + rows
    assert "second &lt;note&gt;" in page  # notes are escaped, not injected
    assert prov["config_hash"] in page and "stage1-step141000" in page  # provenance footer
    assert json.loads((tmp_path / "persistent" / "table1.json").read_text())["config_hash"] == prov["config_hash"]
    before = {p.name: p.read_bytes() for p in csv.parent.iterdir()}
    write_table(df, csv, md, title="Table 1", notes="first note\n\nsecond <note>", marks=marks, provenance=prov)
    assert {p.name: p.read_bytes() for p in csv.parent.iterdir()} == before  # reruns are byte-identical
    with pytest.raises(ValueError, match="marks must align"):
        write_table(df, csv, md, marks=marks.iloc[:2])


def test_write_table_without_provenance_writes_no_sidecar(tmp_path):
    write_table(pd.DataFrame({"a": [1.0]}), tmp_path / "t.csv", tmp_path / "t.md")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.html", "t.md", "t.tex"]


def test_job_provenance_composes_the_fragment_specs_and_input_hashes(tmp_path):
    rec = tmp_path / "generations.parquet"
    rec.write_bytes(b"judged answers")
    cfg = {"seed": 42, "results": str(tmp_path / "results"), "models": MODELS,
           "datasets": {"tqa": {"loader": "triviaqa"}}, "persistent": {"models": ["olmo"], "datasets": ["tqa"]}}
    prov = pv.job_provenance(cfg, [rec], sections=["persistent"], models=["olmo"], datasets=["tqa"])
    assert prov["config_sha256"] == pv.config_sha256(
        {"seed": 42, "persistent": cfg["persistent"], "models": [MODELS[0]], "datasets": cfg["datasets"]})
    assert prov["models"][0]["checkpoints"][1]["revision"] == "stage1-step283000"
    assert prov["inputs"] == {str(rec): hashlib.sha256(b"judged answers").hexdigest()}
    # this package's own checkout (or "unknown" in a plain copy), never an error
    assert prov["git"]["commit"] == "unknown" or len(prov["git"]["commit"]) == 40
