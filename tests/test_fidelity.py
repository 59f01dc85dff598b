"""The fidelity manifest against config/paper.yaml, its quotes against the papers' text
(../shared/papers), the deviation table (docs/deviations.md), and the rehearsal table
(docs/rehearsal.md) against config/rehearsal.yaml.

Quotes are matched after `selfknow.fidelity.normalise_text` on both sides: Unicode NFKC, ASCII
quotes and dashes, a hyphen between two letters dropped with the whitespace after it (the
extractions write "in-context" as "incontext" and keep some line-end hyphens as "- "), runs of
whitespace as one space; case and every other character must agree. Code quotes (a line of
victorwang37/persistent-calibration or yin1245/selfbound) were checked against the stored
repositories when written; offline, the test checks that each holds its setting's value."""
import copy
import re
from pathlib import Path

import pytest
import yaml

from selfknow.config import load_config
from selfknow.fidelity import (
    MISSING, ManifestError, Setting, assign, check_config, deviation_block, load_manifest, paper_texts, parse_shown,
    quote_problems, render_deviations, resolve, value_in_quote)

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "paper.yaml"
DOCS = ROOT / "docs"
PAPERS = ROOT.parent / "shared" / "papers"


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER)


def test_the_paper_config_runs_the_manifests_protocol(manifest, paper):
    assert check_config(paper, manifest) == []


def test_every_paper_has_settings_and_every_key_resolves(manifest, paper):
    assert {s.paper for s in manifest.settings} == {"persistent", "LADDER", "LCAE"}
    # a key that resolves to nothing would pass only by standing for an absent key
    absent = [s.key for s in manifest.settings if resolve(paper, s.key) is MISSING and s.expected is not MISSING]
    assert absent == []


def _changed(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return value[:-1] if len(value) > 1 else value + value
    return f"{value}-changed"


def test_changing_any_manifest_setting_fails_the_check(manifest, paper):
    for i, s in enumerate(manifest.settings):
        v = s.expected
        settings = list(manifest.settings)
        field = "ours" if s.deviation else "value"
        settings[i] = type(s)(**{**s.__dict__, field: _changed("x" if v is MISSING else v)})
        problems = check_config(paper, type(manifest)(tuple(settings), manifest.deviations))
        assert len(problems) == 1 and problems[0].startswith(s.key), (s.key, problems)


#: one setting of each kind per paper, changed in a copy of config/paper.yaml: set in the file,
#: filled from the schema's defaults, a recorded deviation moved to the papers' value
SAMPLE = [
    ("persistent.num_beams", 8), ("persistent.adapter.lr", 1.0e-4), ("persistent.max_new_tokens", 24),
    ("datasets.jeopardy.test_range", [15000, 19000]), ("judge.llm_judge", "gpt-5.5"),
    ("models[name=gpt-5.4-judge].batch", False),
    ("ladder.n_sessions", 10), ("datasets.mmlu.subject_range", [0, 25]), ("ladder.llm_user_model", "qwen-turbo"),
    ("ladder.extension.gsm8k.n_items", 100), ("datasets.mmlu.revision", "main"),
    ("lcae.n_items", 50), ("seed", 7), ("lcae.reflection", "generic"), ("lcae.repeats", 2),
    ("datasets.medxpertqa.config_name", "Other"),
]


@pytest.mark.parametrize("key,value", SAMPLE, ids=[k for k, _ in SAMPLE])
def test_a_copy_of_the_paper_config_with_one_setting_changed_fails(manifest, tmp_path, key, value):
    raw = yaml.safe_load(PAPER.read_text(encoding="utf-8"))
    assert resolve(load_config(PAPER), key) != value
    assign(raw, key, value)
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    problems = check_config(load_config(path), manifest)
    assert [p.split(" = ")[0] for p in problems] == [key]


def test_the_sample_covers_every_paper(manifest):
    papers = {s.key: s.paper for s in manifest.settings}
    assert {papers[k] for k, _ in SAMPLE} == {"persistent", "LADDER", "LCAE"}


def test_the_deviation_table_is_the_manifests(manifest):
    """Issue 23: the rendered deviation table has no row the manifest lacks, and lacks none."""
    text = (DOCS / "deviations.md").read_text(encoding="utf-8")
    a, b = deviation_block(text)
    assert text[a:b] == render_deviations(manifest), "run `selfknow fidelity --docs`"
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| paper |")]
    assert len(rows) == len(manifest.deviations)


def test_writing_the_deviation_table_replaces_only_the_block(manifest, tmp_path):
    from selfknow.fidelity import BLOCK_BEGIN, BLOCK_END, write_deviations

    path = tmp_path / "deviations.md"
    path.write_text(f"# Deviations\n\nprose\n\n{BLOCK_BEGIN}\n| old | row |\n{BLOCK_END}\n\nafter\n", encoding="utf-8")
    assert write_deviations(manifest, path)
    assert path.read_text(encoding="utf-8") == f"# Deviations\n\nprose\n\n{render_deviations(manifest)}\n\nafter\n"
    assert not write_deviations(manifest, path)
    path.write_text("no block\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no generated deviation block"):
        write_deviations(manifest, path)


def test_code_keys_read_constants_and_literal_calls():
    from selfknow.stages.judge import max_judge_tokens

    assert resolve({}, "code:selfknow.stages.judge:max_judge_tokens(10)") == max_judge_tokens(10) == 42
    assert resolve({}, "code:selfknow.models.base:BUDGET_STAGES")[0] == "ladder_answer"
    with pytest.raises(KeyError, match="mapping key"):
        assign({}, "code:selfknow.stages.judge:max_judge_tokens(1)", 3)


def _bad_manifest(tmp_path, mutate) -> Path:
    raw = yaml.safe_load((ROOT / "fidelity" / "manifest.yaml").read_text(encoding="utf-8"))
    mutate(raw)
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r["settings"][0].update(deviation="no-such-row", ours="x"), "unknown deviation 'no-such-row'"),
    (lambda r: r["settings"][0].pop("source"), "missing source"),
    (lambda r: r["settings"].append(copy.deepcopy(r["settings"][0])), "appears twice"),
    (lambda r: r["deviations"][0].update(paper="elsewhere"), "names none of"),
    (lambda r: r["settings"][0].update(key="models[gpt].x"), "must be [field=value] or [*]"),
    (lambda r: r["settings"][0].update(key="code:selfknow.stages.judge"), "a code key is code:module:name"),
    (lambda r: r["settings"][0].update(quote="x", quote_in="paper", unquoted="y"), "exclude each other"),
    (lambda r: r["settings"][0].pop("quote_in"), "'quote' and 'quote_in' go together"),
    (lambda r: r["settings"][0].update(quote_in="GH conset/judge.py"), "is neither 'paper' nor"),
    (lambda r: r["settings"][0].update(quote=[]), "must be a non-empty string or list"),
])
def test_a_malformed_manifest_is_refused(tmp_path, mutate, message):
    with pytest.raises(ManifestError, match=re.escape(message)):
        load_manifest(_bad_manifest(tmp_path, mutate))


# ----------------------------------------------------------------------------- the rehearsal table
#: keys of the rehearsal overlay that say where resources come from, not how big a run is
STAND_IN = {"results", "path", "possible_answer_path"}


def _flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def test_the_rehearsal_table_names_every_size_the_overlay_changes():
    overlay = yaml.safe_load((ROOT / "config" / "rehearsal.yaml").read_text(encoding="utf-8"))
    raw = yaml.safe_load(PAPER.read_text(encoding="utf-8"))
    paper = dict(_flat(raw))
    sizes = {k for k, v in _flat({k: v for k, v in overlay.items() if k != "stand_ins"})
             if k.split(".")[-1] not in STAND_IN and paper.get(k) != v}
    # a model's checkpoints are a size too: the panels keep fewer
    paper_models = {m["name"]: m for m in raw["models"]}
    sizes |= {f"models[name={name}].checkpoints" for name, change in overlay["stand_ins"].items()
              if "checkpoints" in change and change["checkpoints"] != paper_models[name].get("checkpoints", [])}
    text = (DOCS / "rehearsal.md").read_text(encoding="utf-8")
    table = text[text.index("# Rehearse the paper configs here"):text.index("The harness builds the stand-ins")]
    missing = sorted(k for k in sizes if f"`{k}`" not in table)
    assert missing == [], f"docs/rehearsal.md's table does not name {missing}"


# ----------------------------------------------------------------------------- quotes
def test_every_setting_is_quoted_or_says_why(manifest):
    """Issue 47: a setting whose source is a paper or the authors' code carries the quote that
    fixes its value; one without a quotable source says why (`unquoted`)."""
    missing = {s.key for s in manifest.settings if s.quote is None and s.unquoted is None}
    assert missing == set(), f"without a quote or a reason: {sorted(missing)}"


def test_each_quote_holds_its_value(manifest):
    assert quote_problems(manifest, None) == []


def test_each_paper_quote_is_in_its_paper():
    if not PAPERS.is_dir():
        pytest.skip("../shared/papers is not beside this checkout")
    assert quote_problems(load_manifest(), paper_texts(PAPERS)) == []


def _other(value):
    """A value of the same kind that no quote of the original should also hold."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 3 + 7
    if isinstance(value, list):
        return value + [_other(value[-1])]
    if isinstance(value, dict):
        return {**value, "zz_other": 1}
    return f"{value}-other"


def test_a_changed_value_is_not_in_its_quote(manifest):
    quoted = [s for s in manifest.settings if s.quote is not None]
    assert len(quoted) > 80
    wrong = [s.key for s in quoted if value_in_quote(type(s)(**{**s.__dict__, "value": _other(s.value)}))]
    assert wrong == []


def test_a_paper_quote_that_is_not_in_the_paper_is_caught(manifest):
    if not PAPERS.is_dir():
        pytest.skip("../shared/papers is not beside this checkout")
    s = next(s for s in manifest.settings if s.quote_in == "paper")
    bad = type(s)(**{**s.__dict__, "quote": f"{s.quote} (our words)"})
    problems = quote_problems(type(manifest)((bad,), manifest.deviations), paper_texts(PAPERS))
    assert [p.split(": ")[0] for p in problems] == [s.key]


@pytest.mark.parametrize("value,quote,shown_as,holds", [
    (10000, "construct B=104B=10^4 independent replicates", "10^4", True),
    (10000, "construct B=104B=10^4 independent replicates", None, False),
    (5000, "we use 5K questions for training", "5K", True),
    (8733624.454148471, "the highest CE (8.73M)", "8.73M", True),
    (8833624.0, "the highest CE (8.73M)", "8.73M", False),
    (0.8, "stable for the first 80% of training", None, True),
    (2.0e-4, "lr: 2.0e-4", None, True),
    (2000, "use 2,000 draws", None, True),
    (5, "use 50 sessions", None, False),
    (0.5, "a score of 0.55", None, False),
    (["self_ask", "tot"], "Self-Ask, and Tree-of-Thought (ToT)", None, True),
    (["c170c708c41dac9275d15a8fff4eca08d52bab71"], "vLLM @ snapshot c170c708", "c170c708", True),
    ("nli:MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli", 'NLI = "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli"',
     "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli", True),
    ("nli:MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli", "NLI = MoritzLaurer", "nli:", False),
    (3, "Each condition was repeated three times", "three", True),
])
def test_value_in_quote_cases(value, quote, shown_as, holds):
    s = Setting(key="k", paper="LCAE", value=value, source="s", quote=quote, quote_in="paper", shown_as=shown_as)
    assert value_in_quote(s) is holds


def test_parse_shown_reads_paper_notations():
    assert parse_shown("2· 10^-5") == (2e-5, 0.0)
    assert parse_shown("2,000") == (2000.0, 0.0)
    assert parse_shown("80%") == (0.8, 0.0)
    assert parse_shown("8.73M") == (8.73e6, 5000.0)
    assert parse_shown("1e-6") == (1e-6, 0.0)
    with pytest.raises(ValueError, match="cannot read"):
        parse_shown("about ten")
