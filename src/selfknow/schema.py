"""The config schema (schemas/config.schema.yaml): the one list of config keys and the one
place of their defaults.

A leaf module: the config loader and the modules whose settings live in the schema (the world
generator and trainer) both read it, and it imports nothing of the package.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@lru_cache(maxsize=1)
def _schema() -> dict:
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_schema() -> dict:
    """A copy of the whole schema (callers may not mutate the cached one)."""
    return copy.deepcopy(_schema())


def subschema(path: str) -> dict:
    """The schema of the config value at dotted `path`; `*` stands for any key of a mapping
    (its `additionalProperties`) or any element of a list (its `items`)."""
    node = _schema()
    for part in path.split("."):
        if part == "*":
            node = node["items"] if node.get("type") == "array" else node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node


def defaults(path: str) -> dict:
    """The `default:` of every property of the object at `path` that has one."""
    return {k: copy.deepcopy(v["default"]) for k, v in subschema(path)["properties"].items()
            if "default" in v}


def fill_defaults(node, schema: dict) -> None:
    """Write the schema's `default:` values into `node` in place, for every property that is
    absent, then descend; a default that is an object gets its own properties' defaults too."""
    if isinstance(node, dict):
        props = schema.get("properties", {})
        for key, sub in props.items():
            if key not in node and "default" in sub:
                node[key] = copy.deepcopy(sub["default"])
            if key in node:
                fill_defaults(node[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in node.keys() - props.keys():
                fill_defaults(node[key], extra)
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for value in node:
            fill_defaults(value, schema["items"])


class UndefinedConfigKey(KeyError):
    """Code read a config key that the schema does not define."""

    def __str__(self) -> str:
        return self.args[0]


class ConfigSection(dict):
    """A config mapping that refuses keys its schema does not define.

    With every default filled in, a defined key is either present or optional-and-absent,
    so code reads `section["key"]` or tests `"key" in section`. A key the schema does not
    define can only come from code (a typo, a key renamed in the schema): reading it raises
    instead of quietly taking a fallback."""

    def __init__(self, items: dict, where: str, keys: frozenset | None):
        super().__init__(items)
        self._where = where
        self._keys = keys

    def _check(self, key) -> None:
        if self._keys is not None and key not in self._keys:
            raise UndefinedConfigKey(f"config key '{self._where}{key}' is read by the code but not "
                                     f"defined in {SCHEMA_PATH.name}")

    def __getitem__(self, key):
        self._check(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self._check(key)
        return super().__contains__(key)

    def get(self, key, default=None):
        self._check(key)
        return super().get(key, default)

    def __reduce__(self):
        return ConfigSection, (dict(self), self._where, self._keys)

    def __deepcopy__(self, memo):
        return ConfigSection(copy.deepcopy(dict(self), memo), self._where, self._keys)


def strict(node, schema: dict, where: str = ""):
    """`node` with every mapping that has a fixed key list turned into a ConfigSection."""
    if isinstance(node, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", False if props else True)
        closed = extra is False
        out = {}
        for key, value in node.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else {})
            out[key] = strict(value, sub, f"{where}{key}.")
        return ConfigSection(out, where, frozenset(props) if closed else None)
    if isinstance(node, list) and isinstance(schema.get("items"), dict):
        return [strict(v, schema["items"], f"{where[:-1]}[{i}].") for i, v in enumerate(node)]
    return node
