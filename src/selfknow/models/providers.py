"""Provider profiles (provider_profiles.yaml, validated against provider_profiles.schema.yaml):
the request rules of each provider an openai-backend model entry is called through, each rule
citing the documentation page it was read from.

A model entry's profile is its `provider` key, else derived from its base_url's host (an
api.openai.com entry with `request_preset: openai_reasoning` gets `openai_reasoning`; an unknown
host, a local server, gets `vllm`). The request builder (selfknow.models.openai_api) asks the
profile for the structured-output mode (`structured_mode`: json_schema where the provider takes
it, else json_object with the schema in the prompt, else the schema in the prompt alone) and
the documented output-token cap (`output_cap`); the rehearsal server enforces the same table
(selfknow.rehearsal.provider_rules).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import yaml

from selfknow.models.registry import ModelSpecError

TABLE = Path(__file__).with_name("provider_profiles.yaml")
TABLE_SCHEMA = Path(__file__).with_name("provider_profiles.schema.yaml")
#: a structured-output mode: the provider's strict JSON schema, its JSON mode with the schema
#: in the prompt, or the schema in the prompt alone (a provider that ignores response_format)
MODES = ("json_schema", "json_object", "prompt")
#: the line that gives a json_object or prompt-mode request its schema (the rehearsal server
#: reads it back to answer as a model following the instruction would)
SCHEMA_INSTRUCTION = "Reply with one JSON object, no other text, valid under this JSON schema: "


@lru_cache(maxsize=1)
def profiles() -> dict:
    """The validated table: {"sources": ..., "profiles": ...}. A rule citing no known source
    is an error (every rule names the page it comes from)."""
    with open(TABLE, encoding="utf-8") as f:
        table = yaml.safe_load(f)
    with open(TABLE_SCHEMA, encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(table), key=str)
    if errors:
        where = "/".join(map(str, errors[0].absolute_path))
        raise ValueError(f"{TABLE}: {where}: {errors[0].message}")
    for name, prof in table["profiles"].items():
        for rule, value in prof.items():
            if isinstance(value, dict) and value["source"] not in table["sources"]:
                raise ValueError(f"{TABLE}: profiles/{name}/{rule}: unknown source {value['source']!r}")
    return table


def profile_name(spec: dict) -> str:
    """The profile of an openai-backend model entry (module docstring)."""
    table = profiles()["profiles"]
    if "provider" in spec:
        if spec["provider"] not in table:
            raise ModelSpecError(f"model {spec['name']!r}: provider {spec['provider']!r} (key 'provider') "
                                 f"is not a profile of {TABLE.name}: {sorted(table)}")
        return spec["provider"]
    host = urlsplit(spec["base_url"]).hostname
    if host == "api.openai.com" and spec.get("request_preset") == "openai_reasoning":
        return "openai_reasoning"
    return next((name for name, prof in table.items() if host in prof["hosts"]), "vllm")


def profile(name: str) -> dict:
    return profiles()["profiles"][name]


def structured_mode(spec: dict, prof: dict) -> str:
    """The structured-output mode of a model entry: its `structured_output_mode` if set (a
    snapshot the table does not single out, such as the qwen-plus ones DashScope serves with
    json_schema), else the strictest its profile documents."""
    if "structured_output_mode" in spec:
        return spec["structured_output_mode"]
    modes = prof["structured_output"]["modes"]
    return next((m for m in MODES if m in modes), "prompt")


def output_cap(prof: dict, model_id: str) -> int | None:
    """The provider's documented output-token cap for `model_id`; None if none was read."""
    return prof["output_caps"]["models"].get(model_id)


def with_schema_instruction(prompt: str, schema: dict) -> str:
    """`prompt` asking for a reply within `schema` in words (json_object and prompt modes); it
    contains the word JSON, which DeepSeek and DashScope require of a json_object request."""
    return f"{prompt}\n\n{SCHEMA_INSTRUCTION}{json.dumps(schema, sort_keys=True)}"


def schema_in_prompt(prompt: str) -> dict | None:
    """The schema `with_schema_instruction` put in `prompt`, None without one."""
    at = prompt.rfind(SCHEMA_INSTRUCTION)
    if at < 0:
        return None
    try:
        return json.loads(prompt[at + len(SCHEMA_INSTRUCTION):].split("\n", 1)[0])
    except ValueError:
        return None


def reply_error(text: str, schema: dict) -> str | None:
    """Why `text` is not one JSON object valid under `schema` (the local check of a reply no
    server constrained), None if it is."""
    try:
        obj = json.loads(text)
    except ValueError as err:
        return f"not JSON ({err})"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(obj))
    return None if error is None else error.message


def reply_mode(spec: dict) -> str:
    """How a model entry's structured replies are asked for: a mode of MODES, "token-level"
    (an hf model's constraint) or "free text" (structured_output off)."""
    from selfknow.models.base import structured_output

    if not structured_output(spec):
        return "free text"
    if spec["backend"] != "openai":
        return "token-level"
    return structured_mode(spec, profile(profile_name(spec)))


_MODE_WORDS = {"json_schema": "a strict JSON schema (response_format)",
               "json_object": "JSON mode with the schema stated in the prompt",
               "prompt": "the schema stated in the prompt alone",
               "token-level": "a token-level constraint to the schema",
               "free text": "free text"}


def modes_note(specs) -> str:
    """A table note: which models' structured replies were asked for in which mode."""
    by_mode: dict[str, list[str]] = {}
    for spec in specs:
        by_mode.setdefault(reply_mode(spec), []).append(spec["name"])
    parts = [f"{_MODE_WORDS[m]} for {', '.join(names)}" for m, names in by_mode.items()]
    return "Structured replies: " + "; ".join(parts) + "." if parts else ""
