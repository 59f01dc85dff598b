"""LADDER feedback decoding: a rule engine that maps a simulated user's reply to a stance
class (negative / uncertain / positive / neutral) and a label (1, 0 or missing).

The rules are data (`feedback_rules/<name>.yaml`); this module only interprets them
(SPEC §2 "Feedback decoding"; paper §3, §C.2, §E.1). Rule-file format:

    name: <str>
    flags: [IGNORECASE, ...]          # names of `re` flags applied to every pattern
    default: <class>                  # class when no pattern matches (or the reply is empty)
    classes:                          # priority order: the first class with a match wins
      - name: <class>
        patterns: [{id: <str>, re: <regex>}, ...]
    label_maps:                       # class -> 1 / 0 / null, one map per use
      strict: {...}

`strict` must exist: it is the paper's label stream (ambiguous replies are missing).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

RULES_DIR = Path(__file__).with_name("feedback_rules")
RULE_SETS = ("frozen", "expanded")


@dataclass(frozen=True)
class RuleSet:
    """A compiled feedback rule set."""

    name: str
    default: str
    classes: tuple[tuple[str, tuple[tuple[str, re.Pattern], ...]], ...]
    label_maps: dict[str, dict[str, float]] = field(hash=False)

    @property
    def class_names(self) -> list[str]:
        return [c for c, _ in self.classes] + [self.default]

    def decode(self, text: str | None) -> tuple[str, str | None]:
        """(class, id of the first matching pattern of that class, or None)."""
        if text is None or not str(text).strip():
            return self.default, None
        s = str(text).strip()
        for cls, patterns in self.classes:
            for pid, pat in patterns:
                if pat.search(s):
                    return cls, pid
        return self.default, None

    def label(self, cls: str, label_map: str = "strict") -> float:
        """The label of a class under `label_map`: 1.0, 0.0 or NaN (missing)."""
        return self.label_maps[label_map][cls]


def _parse(doc: dict, source: str) -> RuleSet:
    for key in ("name", "default", "classes", "label_maps"):
        if key not in doc:
            raise ValueError(f"{source}: missing key {key!r}")
    flags = 0
    for f in doc.get("flags", []):
        if not hasattr(re, f):
            raise ValueError(f"{source}: unknown regex flag {f!r}")
        flags |= getattr(re, f)
    classes = []
    for i, c in enumerate(doc["classes"]):
        if "name" not in c or "patterns" not in c:
            raise ValueError(f"{source}: classes[{i}] needs 'name' and 'patterns'")
        pats = []
        for j, p in enumerate(c["patterns"]):
            try:
                pats.append((str(p["id"]), re.compile(p["re"], flags)))
            except (KeyError, TypeError) as e:
                raise ValueError(f"{source}: classes[{i}].patterns[{j}] needs 'id' and 're'") from e
            except re.error as e:
                raise ValueError(f"{source}: classes[{i}].patterns[{j}] ({p.get('id')}): {e}") from e
        classes.append((str(c["name"]), tuple(pats)))
    names = {c for c, _ in classes} | {doc["default"]}
    maps: dict[str, dict[str, float]] = {}
    for mname, m in doc["label_maps"].items():
        missing = names - set(m)
        if missing:
            raise ValueError(f"{source}: label_maps.{mname} lacks classes {sorted(missing)}")
        bad = {k: v for k, v in m.items() if v not in (0, 1, None)}
        if bad:
            raise ValueError(f"{source}: label_maps.{mname} values must be 1, 0 or null, got {bad}")
        maps[mname] = {k: (np.nan if v is None else float(v)) for k, v in m.items()}
    if "strict" not in maps:
        raise ValueError(f"{source}: label_maps.strict is required")
    return RuleSet(str(doc["name"]), str(doc["default"]), tuple(classes), maps)


@lru_cache(maxsize=None)
def load_rules(rules: str = "frozen") -> RuleSet:
    """Load a rule set by name (`frozen`, `expanded`) or from a YAML path."""
    path = Path(rules) if (rules.endswith(".yaml") or "/" in rules) else RULES_DIR / f"{rules}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"feedback rule set {rules!r}: no file {path}")
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    return _parse(doc, str(path))


_DECODE_CACHE: dict[int, dict] = {}


def decode_feedback(texts, rules: str | RuleSet = "frozen") -> pd.DataFrame:
    """Decode replies. Returns columns `decoded_category`, `decoded_rule` and one
    `label_<map>` column (float: 1, 0, NaN) per label map of the rule set; `decoded_label`
    is `label_strict`."""
    rs = load_rules(rules) if isinstance(rules, str) else rules
    texts = list(texts)
    # Replies repeat across calls and sessions; decode each distinct text once per rule set.
    cache = _DECODE_CACHE.setdefault(id(rs), {})
    cats, pids = [], []
    for t in texts:
        key = None if t is None or (isinstance(t, float) and np.isnan(t)) else str(t)
        if key not in cache:
            cache[key] = rs.decode(key)
        c, p = cache[key]
        cats.append(c)
        pids.append(p)
    out = pd.DataFrame({"decoded_category": cats, "decoded_rule": pids})
    for mname, m in rs.label_maps.items():
        out[f"label_{mname}"] = out["decoded_category"].map(m).astype(float)
    out["decoded_label"] = out["label_strict"]
    return out


def decoder_precision_recall(decoded_label, correct) -> dict[str, float]:
    """Decoder quality against the true outcomes (paper §E.1, Table 20).

    precision = share of decoded labels that agree with the outcome;
    recall    = share of all turns that receive a label agreeing with the outcome;
    coverage  = share of turns with any label. Per-class precision for positive / negative.
    """
    lab = np.asarray(decoded_label, dtype=float)
    y = np.asarray(correct, dtype=float)
    has = ~np.isnan(lab)
    agree = has & (lab == y)
    n = lab.size
    pos, neg = has & (lab == 1), has & (lab == 0)
    return {
        "n_turns": float(n),
        "coverage": float(has.mean()) if n else float("nan"),
        "precision": float(agree.sum() / has.sum()) if has.any() else float("nan"),
        "recall": float(agree.sum() / n) if n else float("nan"),
        "precision_positive": float((pos & (y == 1)).sum() / pos.sum()) if pos.any() else float("nan"),
        "precision_negative": float((neg & (y == 0)).sum() / neg.sum()) if neg.any() else float("nan"),
    }
