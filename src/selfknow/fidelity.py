"""The fidelity manifest (fidelity/manifest.yaml): every protocol constant the three papers or
their authors' code fix, with its source, checked against a resolved config, and the
"Deviations from the papers" table (docs/deviations.md), rendered from it.

A *setting* names a config key (``models[name=gpt-5.4].mode``, ``datasets.triviaqa.revision``,
``models[name=olmo3-7b].checkpoints[*].revision``), the papers' value and its source. Where we
differ, it also names the deviation (an id of the manifest's ``deviations``) and our value
(``ours``), so a change to either side is caught. A setting whose source can be quoted carries
the ``quote`` (a sentence of the paper, a line of the authors' code) that fixes its value and
where it is (``quote_in``: ``paper``, or ``PC <path>`` / ``SB <path>`` in the authors'
repositories); one that cannot says why (``unquoted``). `quote_problems` checks paper quotes
against the papers' text extractions and, for every quote, that the value appears in it. A *deviation* is one row of that table:
paper, what we do differently, why, where it is set.

    selfknow fidelity config/paper.yaml            # check the config (schema defaults included)
    selfknow fidelity config/paper.yaml --docs     # and rewrite docs/deviations.md's table from the manifest
"""
from __future__ import annotations

import ast
import importlib
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_PATH = ROOT / "fidelity" / "manifest.yaml"
DEVIATIONS_PATH = ROOT / "docs" / "deviations.md"
PAPERS = ("persistent", "LADDER", "LCAE")
#: the lines of docs/deviations.md between which the deviation table is generated
BLOCK_BEGIN = "<!-- deviations: generated from fidelity/manifest.yaml by `selfknow fidelity --docs` -->"
BLOCK_END = "<!-- end of deviations -->"


class ManifestError(ValueError):
    """A malformed manifest entry, with the entry's index and field in the message."""


class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


#: a key the resolved config does not have
MISSING = _Missing()


@dataclass(frozen=True)
class Setting:
    key: str
    paper: str
    value: Any
    source: str
    deviation: str | None = None
    ours: Any = None
    quote: str | list[str] | None = None
    quote_in: str | None = None
    #: the value as the quote writes it where no generated form (`value_forms`) matches:
    #: a number in another notation ("10^4", "5K"), part of a string ("c170c708");
    #: `value_in_quote` checks that it stands for the value
    shown_as: str | None = None
    unquoted: str | None = None

    @property
    def expected(self) -> Any:
        """What the config must hold: the papers' value, or ours where a deviation is recorded
        (None in the manifest stands for an absent key)."""
        v = self.ours if self.deviation else self.value
        return MISSING if v is None else v


@dataclass(frozen=True)
class Deviation:
    id: str
    paper: str
    what: str
    why: str
    where: str


@dataclass(frozen=True)
class Manifest:
    settings: tuple[Setting, ...]
    deviations: tuple[Deviation, ...]

    def deviation(self, id: str) -> Deviation:
        return next(d for d in self.deviations if d.id == id)


_FIELDS = {"settings": ({"key", "paper", "value", "source"},
                         {"deviation", "ours", "quote", "quote_in", "shown_as", "unquoted"}),
           "deviations": ({"id", "paper", "what", "why", "where"}, set())}


def _entries(raw: dict, section: str, where: str) -> list[dict]:
    required, optional = _FIELDS[section]
    entries = raw.get(section)
    if not isinstance(entries, list):
        raise ManifestError(f"{where}: '{section}' must be a list")
    for i, e in enumerate(entries):
        at = f"{where}: {section}[{i}]"
        if not isinstance(e, dict):
            raise ManifestError(f"{at}: must be a mapping")
        if missing := sorted(required - e.keys()):
            raise ManifestError(f"{at}: missing {', '.join(missing)}")
        if extra := sorted(e.keys() - required - optional):
            raise ManifestError(f"{at}: unknown field {extra[0]!r}")
        for k in ("key", "id", "source", "what", "why", "where", "quote_in", "shown_as", "unquoted"):
            if k in e and not (isinstance(e[k], str) and e[k].strip()):
                raise ManifestError(f"{at}.{k}: must be a non-empty string")
        q = e.get("quote")
        if q is not None and not (isinstance(q, str) and q.strip() or isinstance(q, list) and q
                                  and all(isinstance(x, str) and x.strip() for x in q)):
            raise ManifestError(f"{at}.quote: must be a non-empty string or list of strings")
        if not any(p in e["paper"] for p in PAPERS):
            raise ManifestError(f"{at}.paper: {e['paper']!r} names none of {', '.join(PAPERS)}")
    return entries


def load_manifest(path: str | Path = MANIFEST_PATH) -> Manifest:
    """The manifest at `path`, checked: required fields, known deviation ids, one entry per key."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    if not isinstance(raw, dict):
        raise ManifestError(f"{path}: must be a mapping with 'settings' and 'deviations'")
    deviations = tuple(Deviation(**e) for e in _entries(raw, "deviations", str(path)))
    ids = [d.id for d in deviations]
    if twice := sorted({i for i in ids if ids.count(i) > 1}):
        raise ManifestError(f"{path}: deviation id {twice[0]!r} appears twice")
    settings = []
    for i, e in enumerate(_entries(raw, "settings", str(path))):
        s = Setting(**e)
        if s.deviation is not None and s.deviation not in ids:
            raise ManifestError(f"{path}: settings[{i}] ({s.key}): unknown deviation {s.deviation!r}")
        if s.deviation is None and "ours" in e:
            raise ManifestError(f"{path}: settings[{i}] ({s.key}): 'ours' needs a 'deviation'")
        if s.deviation is not None and s.ours == s.value:
            raise ManifestError(f"{path}: settings[{i}] ({s.key}): 'ours' equals the papers' value")
        _check_quote_fields(s, f"{path}: settings[{i}] ({s.key})")
        parse_key(s.key)
        settings.append(s)
    keys = [s.key for s in settings]
    if twice := sorted({k for k in keys if keys.count(k) > 1}):
        raise ManifestError(f"{path}: setting {twice[0]!r} appears twice")
    return Manifest(tuple(settings), deviations)


# ----------------------------------------------------------------------------- keys
_TOKEN = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")
_CODE = re.compile(r"^code:([\w.]+):(\w+)(?:\((.*)\))?$")


def parse_key(key: str) -> list[tuple[str, str]]:
    """A key as (kind, text) steps: ('key', k) a mapping key, ('select', 'name=x') the list
    element whose field equals x, ('each', '*') every element of a list; a ``code:`` key is
    one ('code', key) step."""
    if key.startswith("code:"):
        if not _CODE.match(key):
            raise ManifestError(f"key {key!r}: a code key is code:module:name or code:module:function(literal, ...)")
        return [("code", key)]
    steps, pos = [], 0
    for m in _TOKEN.finditer(key):
        gap = key[pos:m.start()]
        if gap not in ("", "."):
            raise ManifestError(f"key {key!r}: cannot parse near {gap!r}")
        pos = m.end()
        if m.group(2) is not None:
            steps.append(("key", m.group(2)))
        elif m.group(1) == "*":
            steps.append(("each", "*"))
        elif "=" in m.group(1):
            steps.append(("select", m.group(1)))
        else:
            raise ManifestError(f"key {key!r}: [{m.group(1)}] must be [field=value] or [*]")
    if pos != len(key) or not steps:
        raise ManifestError(f"key {key!r}: cannot parse")
    return steps


def _select(node: Any, sel: str, key: str) -> Any:
    field_, value = sel.split("=", 1)
    if not isinstance(node, list):
        return MISSING
    hits = [x for x in node if isinstance(x, dict) and str(x.get(field_)) == value]
    if len(hits) > 1:
        raise ManifestError(f"key {key!r}: [{sel}] matches {len(hits)} entries")
    return hits[0] if hits else MISSING


def code_value(key: str) -> Any:
    """The value of a code constant, ``code:module:NAME``, or of a call with literal
    arguments, ``code:module:function(1, x="y")``: protocol constants the config does not
    hold (budgets, prompts rendered on a fixed example)."""
    m = _CODE.match(key)
    if not m:
        raise ManifestError(f"key {key!r}: a code key is code:module:name or code:module:function(literal, ...)")
    obj = getattr(importlib.import_module(m.group(1)), m.group(2))
    if m.group(3) is None:
        return obj
    call = ast.parse(f"f({m.group(3)})", mode="eval").body
    return obj(*[ast.literal_eval(a) for a in call.args],
               **{k.arg: ast.literal_eval(k.value) for k in call.keywords})


def resolve(cfg: Any, key: str) -> Any:
    """The value at `key` in a config (or of a ``code:`` key, `code_value`), or MISSING."""
    if key.startswith("code:"):
        return code_value(key)
    def walk(node: Any, steps: list) -> Any:
        for i, (kind, text) in enumerate(steps):
            if node is MISSING:
                return MISSING
            if kind == "key":
                node = node.get(text, MISSING) if isinstance(node, dict) else MISSING
            elif kind == "select":
                node = _select(node, text, key)
            else:
                return [walk(x, steps[i + 1:]) for x in node] if isinstance(node, list) else MISSING
        return node
    return walk(cfg, parse_key(key))


def assign(cfg: dict, key: str, value: Any) -> None:
    """Set `key` in a raw config (mappings created on the way; a selected list entry must exist)."""
    steps = parse_key(key)
    node = cfg
    for kind, text in steps[:-1]:
        if kind == "key":
            node = node.setdefault(text, {})
        elif kind == "select":
            node = _select(node, text, key)
            if node is MISSING:
                raise KeyError(f"{key}: no entry [{text}]")
        else:
            raise KeyError(f"{key}: cannot assign through [*]")
    kind, text = steps[-1]
    if kind != "key":  # also a code key: it is not in the config
        raise KeyError(f"{key}: the last step must be a mapping key")
    node[text] = value


# ----------------------------------------------------------------------------- the check
def _plain(x: Any) -> Any:
    """Config values compared as plain YAML data (strict mappings, tuples, int-valued floats)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def check_config(cfg: dict, manifest: Manifest) -> list[str]:
    """One message per setting whose resolved value is not what the manifest expects: the
    papers' value, or, where a deviation is recorded, ours. `cfg` has its schema defaults
    filled (selfknow.config.validate_config)."""
    problems = []
    for s in manifest.settings:
        got, want = resolve(cfg, s.key), s.expected
        if _plain(got) == _plain(want):
            continue
        if s.deviation:
            problems.append(f"{s.key} = {got!r}: the manifest records our deviation "
                            f"'{s.deviation}' as {want!r} (papers: {s.value!r}; {s.source})")
        else:
            problems.append(f"{s.key} = {got!r} differs from the papers' {want!r} ({s.source}) and no "
                            f"deviation is recorded in {MANIFEST_PATH.relative_to(ROOT)}")
    return problems


# ----------------------------------------------------------------------------- the deviation table
def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_deviations(manifest: Manifest) -> str:
    """The deviation table of docs/deviations.md, one row per manifest deviation, in manifest order."""
    lines = [BLOCK_BEGIN, "", "| paper | what we do differently | why | where it is set |", "|---|---|---|---|"]
    lines += [f"| {_cell(d.paper)} | {_cell(d.what)} | {_cell(d.why)} | {_cell(d.where)} |"
              for d in manifest.deviations]
    return "\n".join(lines + ["", BLOCK_END])


def deviation_block(text: str, source: str = "docs/deviations.md") -> tuple[int, int]:
    """Start and end offsets of the generated block in `text` (the contents of `source`)."""
    a, b = text.find(BLOCK_BEGIN), text.find(BLOCK_END)
    if a < 0 or b < a:
        raise ValueError(f"{source}: no generated deviation block ({BLOCK_BEGIN!r} ... {BLOCK_END!r})")
    return a, b + len(BLOCK_END)


def write_deviations(manifest: Manifest, path: str | Path = DEVIATIONS_PATH) -> bool:
    """Rewrite the generated deviation block of `path` (docs/deviations.md); True if it changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    a, b = deviation_block(text, str(path))
    new = text[:a] + render_deviations(manifest) + text[b:]
    if new != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(path)
    return new != text


# ----------------------------------------------------------------------------- quotes
#: the authors' repositories a code quote's `quote_in` names (as the manifest's sources do)
REPOS = {"PC": "victorwang37/persistent-calibration", "SB": "yin1245/selfbound"}
#: the short names of ../shared/papers/README.md's table, per manifest paper
PAPER_SHORT = {"persistent": "persistent", "LADDER": "ladder", "LCAE": "lcae"}
_QUOTE_IN = re.compile(r"^(?:paper|(PC|SB) \S+)$")


def _check_quote_fields(s: Setting, at: str) -> None:
    if s.quote is not None and s.unquoted is not None:
        raise ManifestError(f"{at}: a quote and 'unquoted' exclude each other")
    if (s.quote is None) != (s.quote_in is None):
        raise ManifestError(f"{at}: 'quote' and 'quote_in' go together")
    if s.shown_as is not None and s.quote is None:
        raise ManifestError(f"{at}: 'shown_as' needs a 'quote'")
    if s.quote_in is not None and not _QUOTE_IN.match(s.quote_in):
        raise ManifestError(f"{at}.quote_in: {s.quote_in!r} is neither 'paper' nor 'PC <path>' / 'SB <path>'")
    if s.quote_in == "paper" and s.paper not in PAPER_SHORT:
        raise ManifestError(f"{at}.quote_in: 'paper' needs one paper, not {s.paper!r}")


def quotes(s: Setting) -> list[str]:
    """The setting's quoted excerpts: one, or several of the same source."""
    return [] if s.quote is None else [s.quote] if isinstance(s.quote, str) else list(s.quote)


_PUNCT = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
                        "\u2014": "-", "\u2212": "-", "\u00a0": " ", "\u2009": " ", "\u202f": " "})


def normalise_text(text: str) -> str:
    """Text as quotes are matched in the papers' extractions, applied to both sides: Unicode
    NFKC (ligatures, superscripts), typographic quotes and dashes as ASCII, a hyphen between
    two letters dropped with any whitespace after it (the extractions join hyphenated words,
    "in-context" -> "incontext", or keep a line-end hyphen as "- "), every run of whitespace
    one space. Case and all other characters are kept."""
    t = unicodedata.normalize("NFKC", text).translate(_PUNCT)
    t = re.sub(r"(?<=[A-Za-z])-\s*(?=[A-Za-z])", "", t)
    return " ".join(t.split())


def _number_forms(x: float) -> set[str]:
    forms = {repr(x), f"{x:g}", str(x)}
    if float(x).is_integer():
        n = int(x)
        forms |= {str(n), f"{n:,}", f"{n:.1f}"}
    else:
        mant, exp = f"{x:e}".split("e")
        m, e = float(mant), int(exp)
        forms |= {f"{m:g}e{e}", f"{m:.1f}e{e}", f"{m:g}e{e:03d}" if e < 0 else f"{m:g}e+{e:02d}"}
        if 0 < x < 1:
            forms |= {f"{100 * x:g}%", f"{100 * x:g} %", f"{x:g}".lstrip("0")}
    return forms


def value_forms(value: Any) -> list[set[str]]:
    """The texts that stand for `value` in a quote, one set per part that must appear: a
    scalar is one part, a list one per element, a mapping one per key and one per value."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in value_forms(k) + value_forms(v)]
    if isinstance(value, list):
        return [p for v in value for p in value_forms(v)]
    if isinstance(value, bool):
        return [{str(value).lower(), str(value)}]
    if isinstance(value, (int, float)):
        return [_number_forms(value)]
    return [{str(value)}]


_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}
_SCALE = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "%": 0.01, "\\%": 0.01}


def parse_shown(text: str) -> tuple[float, float]:
    """A number as a paper, a config or code writes it (10^4, 2· 10^-5, 1e-6, 5K, 8.73M, 80%,
    2,000, three) and half a unit of its last written digit: the value it may stand for lies within
    that of the number."""
    t = text.strip().replace(",", "")
    if t.lower() in _WORDS:
        return float(_WORDS[t.lower()]), 0.0
    if m := re.fullmatch(r"(?:(\d+(?:\.\d+)?)\s*[\u22c5\u00b7\u00d7*x]\s*)?(\d+)\s*\^\s*\{?(-?\d+)\}?", t):
        mant = float(m.group(1)) if m.group(1) else 1.0
        return mant * float(m.group(2)) ** int(m.group(3)), 0.0
    if re.fullmatch(r"\d+(?:\.\d+)?[eE]-?\d+", t):  # code's float literal: exact
        return float(t), 0.0
    m = re.fullmatch(r"(\d+(?:\.(\d+))?)\s*(K|k|M|\\?%)?", t)
    if not m:
        raise ValueError(f"cannot read {text!r} as a number")
    scale = _SCALE[m.group(3) or ""]
    decimals = len(m.group(2) or "")
    return float(m.group(1)) * scale, 0.5 * 10 ** -decimals * scale if m.group(3) in ("K", "k", "M") else 0.0


def _appears(form: str, quote: str) -> bool:
    f = normalise_text(form)
    return bool(f) and re.search(rf"(?<![\w.]){re.escape(f)}(?!\w|\.\d)", quote) is not None


_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _names(value: str, quote: str) -> bool:
    """A config identifier (`self_ask`, `ids_dpr`, `Text`) names what the quote writes when
    each of its `_`-separated words is in it, case aside ("Self-Ask", "IDS with DPR")."""
    low = quote.lower()
    return all(w in low for w in value.lower().split("_") if w)


def value_in_quote(s: Setting) -> bool:
    """Whether the papers' value appears in the setting's quote(s): each of `value_forms`'s
    parts (an identifier as `_names` has it), or `shown_as`, which must be in the quote and
    stand for the value: a number within half a unit of its last written digit, a string a
    prefix or suffix of the value of at least four characters (the rest is our key's syntax:
    "nli:" before a hub id, a full commit hash after its abbreviation)."""
    quote = normalise_text("\n".join(quotes(s)))
    if s.shown_as is not None:
        value = s.value[0] if isinstance(s.value, list) and len(s.value) == 1 else s.value
        if not _appears(s.shown_as, quote):
            return False
        if isinstance(value, str):
            return len(s.shown_as) >= 4 and (value.startswith(s.shown_as) or value.endswith(s.shown_as))
        try:
            number, half_unit = parse_shown(s.shown_as)
            return math.isclose(number, float(value), rel_tol=1e-12) or abs(number - float(value)) <= half_unit
        except (TypeError, ValueError):
            return False
    parts = value_forms(s.value)
    return bool(parts) and all(
        any(_appears(f, quote) or (_IDENTIFIER.match(f) and not f.isdigit() and _names(f, quote)) for f in forms)
        for forms in parts)


def paper_texts(papers_dir: str | Path) -> dict[str, str]:
    """The normalised text of each manifest paper, found by its short name in the table of
    `papers_dir`/README.md."""
    papers_dir = Path(papers_dir)
    files = {}
    for line in (papers_dir / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].endswith(".txt"):
            files[cells[2]] = cells[0]
    out = {}
    for paper, short in PAPER_SHORT.items():
        if short not in files:
            raise ValueError(f"{papers_dir / 'README.md'}: no paper with short name {short!r}")
        out[paper] = normalise_text((papers_dir / files[short]).read_text(encoding="utf-8"))
    return out


def quote_problems(manifest: Manifest, texts: dict[str, str] | None) -> list[str]:
    """One message per quote whose value does not appear in it, and, with the papers' `texts`
    (`paper_texts`), per paper excerpt not in its paper's text."""
    problems = []
    for s in manifest.settings:
        if s.quote is None:
            continue
        if not value_in_quote(s):
            problems.append(f"{s.key}: the value {s.value!r} is not in its quote {s.quote!r}")
        if texts is not None and s.quote_in == "paper":
            problems += [f"{s.key}: not in the {s.paper} paper's text: {q!r}" for q in quotes(s)
                         if normalise_text(q) not in texts[s.paper]]
    return problems
