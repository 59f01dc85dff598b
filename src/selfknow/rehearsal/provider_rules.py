"""The provider-rules layer of the stand-in server: what each provider profile
(selfknow.models.providers) answers with HTTP 400, so that a rehearsal of a config a provider
would reject fails, naming the model and the parameter.

Enforced here: a response_format the provider rejects (`structured_output.unsupported:
reject`), a json_object request without the word the provider requires in its messages
(DeepSeek, DashScope), and a token limit above the model's documented output cap. The OpenAI
reasoning models' parameter rules stay the server's own (`reasoning_rule_violation`). Errors
come in the OpenAI error envelope, which every profile's endpoint uses for its
OpenAI-compatible errors; the messages are ours except DashScope's json_object one, quoted from
its documentation.
"""
from __future__ import annotations

from selfknow.models import providers

_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def _format_type(path: str, body: dict) -> str | None:
    if path.endswith("/responses"):
        return ((body.get("text") or {}).get("format") or {}).get("type")
    return (body.get("response_format") or {}).get("type")


def _prompt_text(path: str, body: dict) -> str:
    if path.endswith("/responses"):
        return f"{body.get('instructions') or ''}\n{body.get('input') or ''}"
    return "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])


def violation(profile_name: str | None, model: str, path: str, body: dict) -> tuple[str, str] | None:
    """(param, message) of the first rule of profile `profile_name` the request breaks, None
    if it keeps them all (or the model has no profile)."""
    if profile_name is None:
        return None
    prof = providers.profile(profile_name)
    rules = prof["structured_output"]
    kind = _format_type(path, body)
    if kind in ("json_schema", "json_object") and kind not in rules["modes"] and rules["unsupported"] == "reject":
        return "response_format", (f"model '{model}' ({profile_name}): response_format type '{kind}' is not "
                                   f"supported; this provider serves {rules['modes'] or 'no response_format'}")
    word = rules.get("json_object_needs_word")
    if kind == "json_object" and word and word not in _prompt_text(path, body).lower():
        return "messages", (f"'messages' must contain the word '{word}' in some form, to use "
                            f"'response_format' of type 'json_object'.")
    cap = providers.output_cap(prof, model)
    for param in _LIMITS:
        if cap is not None and isinstance(body.get(param), int) and body[param] > cap:
            return param, (f"model '{model}' ({profile_name}): {param} {body[param]} exceeds the "
                           f"model's maximum output of {cap} tokens")
    return None


def prompt_format(prompt: str) -> dict | None:
    """The strict response format a model following a schema instruction in `prompt`
    (`providers.with_schema_instruction`) keeps to, None without one."""
    schema = providers.schema_in_prompt(prompt)
    return None if schema is None else {"name": "reply", "schema": schema, "strict": True}
