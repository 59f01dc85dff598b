"""Provider profiles (issue #26 items 2-3): the table validates and cites a page and a date for
every rule; each paper model maps to a profile; the request builder adapts within the protocol
(json_schema where documented, json_object with the schema in the prompt, or the prompt alone;
output caps); the stand-in server answers each model with its provider's rules, so a config
that sends json_schema to a json_object-only provider fails naming the model and parameter."""
from __future__ import annotations

import copy
import json

import pytest

from selfknow.models import ModelSpecError, load_lm, providers
from selfknow.models.http_retry import RequestFailed
from selfknow.rehearsal import harness
from selfknow.rehearsal.server import StandInServer

SCHEMA = {"type": "object", "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1}},
          "required": ["p"], "additionalProperties": False}
KEYS = ("DASHSCOPE_API_KEY", "OPENAI_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")


def test_table_validates_and_every_rule_cites_a_dated_page():
    table = providers.profiles()
    for name, prof in table["profiles"].items():
        for rule, value in prof.items():
            if isinstance(value, dict):
                src = table["sources"][value["source"]]
                assert src["url"].startswith("https://") and len(src["date"]) == 10, (name, rule)


def test_a_rule_citing_an_unknown_page_is_refused(tmp_path, monkeypatch):
    bad = providers.profiles.__wrapped__  # the uncached loader
    table = copy.deepcopy(providers.profiles())
    table["profiles"]["deepseek"]["stop"]["source"] = "nowhere"
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps(table), encoding="utf-8")
    monkeypatch.setattr(providers, "TABLE", path)
    with pytest.raises(ValueError, match="profiles/deepseek/stop: unknown source 'nowhere'"):
        bad()
    del table["profiles"]["deepseek"]["batch"]
    path.write_text(json.dumps(table), encoding="utf-8")
    with pytest.raises(ValueError, match="profiles/deepseek.*'batch' is a required property"):
        bad()


def test_every_paper_api_model_has_the_profile_of_its_endpoint():
    config = harness.load_config(("config/paper.yaml",))
    got = {m["name"]: providers.profile_name(m) for m in config["models"] if m["backend"] == "openai"}
    assert got["qwen-max"] == got["deepseek-r1"] == got["glm-5"] == "dashscope"
    assert got["deepseek-v4-pro"] == "deepseek" and got["gpt-5.4"] == "openai_reasoning"
    assert got["claude-opus-4-7"] == "anthropic" and got["gemini-2.5-pro"] == "gemini"
    assert got["gpt-oss-120b"] == "vllm"
    modes = {n: providers.structured_mode({}, providers.profile(p)) for n, p in got.items()}
    assert (modes["qwen-max"], modes["deepseek-v4-pro"], modes["claude-sonnet-4-6"], modes["gpt-5"],
            modes["gemini-2.5-pro"]) == ("json_object", "json_object", "prompt", "json_schema", "json_schema")


@pytest.fixture
def stand_in():
    models = {"qwen-max": "dashscope", "deepseek-r1": "dashscope", "claude-sonnet-4-6": "anthropic",
              "gemini-2.5-pro": "gemini", "deepseek-v4-pro": "deepseek", "gpt-5.4": "openai_reasoning"}
    server = StandInServer(models, reasoning=["gpt-5.4"], providers=models)
    yield server
    server.close()


def _lm(server, model, monkeypatch, **kw):
    for key in KEYS:
        monkeypatch.setenv(key, "k")
    spec = {"name": model, "backend": "openai", "base_url": server.url, "model": model, "mode": "chat",
            "max_retries": 0, "timeout_s": 10.0, "provider": server.providers[model], **kw}
    return load_lm(spec, cache_dir=None)


@pytest.mark.parametrize("model, sent_format, in_prompt", [
    ("qwen-max", {"type": "json_object"}, True),
    ("deepseek-v4-pro", {"type": "json_object"}, True),
    ("claude-sonnet-4-6", None, True),
    ("gemini-2.5-pro", "json_schema", False),
])
def test_each_provider_gets_its_mode_and_a_reply_within_the_schema(stand_in, monkeypatch, model, sent_format,
                                                                 in_prompt):
    lm = _lm(stand_in, model, monkeypatch)
    endpoint, body = lm.request_body("x", chat=True, system=None, max_tokens=8, temperature=0.0, stop=None,
                                     sample_index=0)
    got = lm.generate(["How sure are you?"], max_new_tokens=32, chat=True, json_schemas=[SCHEMA])
    assert providers.reply_error(got[0].text, SCHEMA) is None
    captured = []
    monkeypatch.setattr(lm, "_post", lambda e, b, i: captured.append(b) or {"choices": [
        {"message": {"content": '{"p": 0.5}'}, "finish_reason": "stop"}]})
    lm.generate(["How sure?"], max_new_tokens=32, chat=True, json_schemas=[SCHEMA])
    fmt = captured[0].get("response_format")
    assert (fmt.get("type") if sent_format == "json_schema" else fmt) == sent_format
    prompt = captured[0]["messages"][-1]["content"]
    assert (providers.SCHEMA_INSTRUCTION in prompt) == in_prompt
    if in_prompt:
        assert "JSON" in prompt and providers.schema_in_prompt(prompt) == SCHEMA


def test_json_schema_to_a_json_object_only_provider_fails_naming_model_and_parameter(stand_in, monkeypatch):
    """The acceptance case: a config copy forcing json_schema on a DashScope model."""
    lm = _lm(stand_in, "qwen-max", monkeypatch, structured_output_mode="json_schema")
    with pytest.raises(RequestFailed, match=r"(?s)'qwen-max'.*HTTP 400.*response_format.*json_schema"):
        lm.generate(["How sure?"], max_new_tokens=16, chat=True, json_schemas=[SCHEMA])
    code, err = stand_in.respond("/v1/chat/completions", {
        "model": "qwen-max", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA, "strict": True}}})
    assert code == 400 and err["error"]["param"] == "response_format" and "qwen-max" in err["error"]["message"]


def test_json_object_without_the_word_json_is_refused_as_dashscope_words_it(stand_in):
    code, err = stand_in.respond("/v1/chat/completions", {
        "model": "qwen-max", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}})
    assert code == 400 and "must contain the word 'json'" in err["error"]["message"]


def test_output_cap_clips_reasoning_room_and_refuses_a_larger_answer_budget(stand_in, monkeypatch):
    lm = _lm(stand_in, "deepseek-r1", monkeypatch, reasoning_tokens=8192)
    assert lm.output_cap == 16384  # DashScope's documented max response for deepseek-r1
    body = lm.request_body("q", chat=True, system=None, max_tokens=256, temperature=0.0, stop=None, sample_index=0)[1]
    assert body["max_tokens"] == 256 + 8192
    lm = _lm(stand_in, "deepseek-r1", monkeypatch, reasoning_tokens=20000)
    body = lm.request_body("q", chat=True, system=None, max_tokens=256, temperature=0.0, stop=None, sample_index=0)[1]
    assert body["max_tokens"] == 16384
    with pytest.raises(ModelSpecError, match="'deepseek-r1'.*20000 output tokens.*16384.*dashscope"):
        lm.request_body("q", chat=True, system=None, max_tokens=20000, temperature=0.0, stop=None, sample_index=0)
    code, err = stand_in.respond("/v1/chat/completions", {
        "model": "deepseek-r1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16385})
    assert code == 400 and err["error"]["param"] == "max_tokens" and "deepseek-r1" in err["error"]["message"]


def test_temperature_above_the_provider_maximum_and_unsupported_logprobs_stop(stand_in, monkeypatch):
    lm = _lm(stand_in, "claude-sonnet-4-6", monkeypatch)
    with pytest.raises(ModelSpecError, match="'claude-sonnet-4-6': temperature 1.5 is above the 1"):
        lm.request_body("q", chat=True, system=None, max_tokens=8, temperature=1.5, stop=None, sample_index=0)
    with pytest.raises(ModelSpecError, match="'claude-sonnet-4-6'.*logprobs.*anthropic"):
        _lm(stand_in, "claude-sonnet-4-6", monkeypatch, logprobs=True)


def test_an_unknown_provider_names_the_key(monkeypatch):
    with pytest.raises(ModelSpecError, match="provider 'acme' \\(key 'provider'\\)"):
        providers.profile_name({"name": "m", "provider": "acme", "base_url": "http://x"})


@pytest.mark.parametrize("text, ok", [('{"p": 0.4}', True), ('{"p": 1.4}', False), ('{"p": 0.4, "q": 1}', False),
                                      ("0.4", False), ("sure", False)])
def test_local_check_of_an_unconstrained_reply(text, ok):
    assert (providers.reply_error(text, SCHEMA) is None) == ok


def test_the_table_note_says_which_models_got_which_mode():
    config = harness.load_config(("config/paper.yaml",))
    by_name = {m["name"]: m for m in config["models"]}
    names = ["gpt-5", "qwen-max", "claude-opus-4-7", "llama-3-8b"]
    note = providers.modes_note([by_name[n] for n in names]
                                + [{**by_name["gemini-2.5-pro"], "structured_output": False}])
    assert note == ("Structured replies: a strict JSON schema (response_format) for gpt-5; JSON mode with the "
                    "schema stated in the prompt for qwen-max; the schema stated in the prompt alone for "
                    "claude-opus-4-7; a token-level constraint to the schema for llama-3-8b; free text for "
                    "gemini-2.5-pro.")
