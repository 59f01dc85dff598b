"""The README and docs/: every relative link resolves, CI runs the README's test command, the
README stays a short guide, and docs/extending.md's backend example runs against the LM
interface."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: the README is a guide read in order (issue 27); the manual lives in docs/
README_MAX_LINES = 260

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """Markdown without code blocks and code spans, where brackets are no links."""
    return _CODE.sub("", _FENCE.sub("", text))


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", _prose(path.read_text(encoding="utf-8")), re.M)}


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `path` whose file or heading does not exist. Links that leave the
    repository (the workspace's SPEC) and web links are not checked."""
    problems = []
    for target in _LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.is_relative_to(root.resolve()):
            continue
        if not dest.exists():
            problems.append(f"{path.relative_to(root)}: {target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{path.relative_to(root)}: {target}: no heading #{fragment} in {dest.name}")
    return problems


def test_the_anchor_of_a_heading_is_githubs():
    assert _anchor("Use your own results") == "use-your-own-results"
    assert _anchor("A persistent table") == "a-persistent-table"
    assert _anchor("Models: API options, the Batch API") == "models-api-options-the-batch-api"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Two words\n", encoding="utf-8")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#two-words) [self](#here) [gone](c.md) [bad](a.md#three) `[code](c.md)`\n"
                   "```\n[fenced](c.md)\n```\n[web](https://example.org) [out](../elsewhere.md)\n# Here\n",
                   encoding="utf-8")
    assert broken_links(doc, tmp_path) == ["b.md: c.md: no such file", "b.md: a.md#three: no heading #three in a.md"]


@pytest.mark.parametrize("doc", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_relative_link_resolves(doc):
    assert broken_links(doc) == []


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"Run the tests:\s*```bash\n(.+?)\n```", readme, re.S)
    assert block, "the README's set-up section has no test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert block.group(1).strip() in ci


@pytest.mark.parametrize("doc", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_table_a_doc_names_is_one_the_workflow_writes(doc):
    """A reader sent to results/tables/<section>/<name>.md finds a table of the catalog there."""
    from selfknow.catalogs import REPORT

    named = set(re.findall(r"results/tables/([a-z0-9_]+/[a-z0-9_]+)\.md", doc.read_text(encoding="utf-8")))
    assert sorted(named - set(REPORT)) == []


def test_the_readme_stays_a_short_guide():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines: move the detail to docs/ (docs/README.md)"


def test_the_extending_guides_backend_example_runs(tmp_path):
    """The backend of docs/extending.md implements the current LM interface and answers
    through the request cache."""
    from selfknow.models import registry

    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "register_backend(" in b)
    try:
        exec(compile(code, "docs/extending.md", "exec"), {"__name__": "extending_example"})
        cls = registry.backend_class("replay")
        replies = tmp_path / "replies.jsonl"
        rows = [{"prompt": "Q1", "text": "A1"}, {"prompt": "Q2", "text": "A2"}]
        replies.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        spec = {"name": "replayed", "path": str(replies)}
        first = cls(spec, {"name": "final"}, cache_dir=tmp_path / "cache")
        assert [g.text for g in first.generate(["Q2", "Q1"], max_new_tokens=8)] == ["A2", "A1"]
        again = cls(spec, {"name": "final"}, cache_dir=tmp_path / "cache")
        assert [g.text for g in again.generate(["Q1"], max_new_tokens=8)] == ["A1"]
        assert (again.stats.hits, again.stats.misses) == (1, 0)
        with pytest.raises(KeyError, match="no recorded reply for prompt 0"):
            first.generate(["Q3"], max_new_tokens=8)
    finally:
        registry._BACKENDS.pop("replay", None)
