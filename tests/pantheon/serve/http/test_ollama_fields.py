"""Ollama's request fields: options restated as chat fields, messages as OpenAI's, refusals named as sent."""

import json

import pytest

from pantheon.serve.http import ollama_fields
from pantheon.serve.http.errors import RequestError


def test_sampling_options_become_chat_fields_and_runner_options_change_nothing():
    out = ollama_fields.options("options", {"temperature": 0.2, "num_predict": 7, "stop": ["\n"], "seed": 3,
                                            "num_ctx": 8192, "num_gpu": 99, "use_mmap": False, "num_thread": 4})
    assert out == {"temperature": 0.2, "n_predict": 7, "stop": ["\n"], "seed": 3}
    assert ollama_fields.options("options", {"num_predict": -2}) == {"n_predict": -1}  # -2: fill the context


def test_parsed_chat_request_carries_sampling_format_tools_and_thinking():
    values = {"options": ollama_fields.options("options", {"temperature": 0, "num_predict": 5, "top_k": 3}),
              "format": ollama_fields.response_format("format", "json"), "think": False,
              "tools": [{"type": "function", "function": {"name": "f"}}], "logprobs": True, "top_logprobs": 2}
    parsed = ollama_fields.parsed("m", [{"role": "user", "content": "hi"}], values, stream=True)
    assert parsed.max_tokens == 5 and parsed.sampling["temperature"] == 0 and parsed.sampling["top_k"] == 3
    assert parsed.response_format == {"type": "json_object"} and parsed.tools[0]["function"]["name"] == "f"
    assert parsed.template_kwargs == {"enable_thinking": False} and parsed.logprobs == 2 and parsed.stream


def test_a_schema_format_is_a_json_schema_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert ollama_fields.response_format("format", schema) == {
        "type": "json_schema", "json_schema": {"name": "format", "schema": schema}}
    assert ollama_fields.response_format("format", "") is None


def test_messages_restate_tool_calls_tool_names_and_thinking():
    out = ollama_fields.messages("messages", [
        {"role": "assistant", "content": "", "thinking": "hmm",
         "tool_calls": [{"function": {"name": "w", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "cold", "tool_name": "w"}])
    assert out[0]["reasoning_content"] == "hmm" and out[1] == {"role": "tool", "content": "cold", "name": "w"}
    call = out[0]["tool_calls"][0]
    assert call["type"] == "function" and json.loads(call["function"]["arguments"]) == {"city": "Oslo"}


@pytest.mark.parametrize("value", [0, 300, -1, "5m", "1h30m", "-1", "0", "250ms", "1.5h"])
def test_keep_alive_takes_seconds_and_go_durations(value):
    assert ollama_fields.keep_alive("keep_alive", value) == value


@pytest.mark.parametrize("check, value, field", [
    (ollama_fields.keep_alive, "5 minutes", "keep_alive"), (ollama_fields.keep_alive, True, "keep_alive"),
    (ollama_fields.think, "max", "think"), (ollama_fields.options, {"num_ctx": "big"}, "options.num_ctx"),
    (ollama_fields.options, [], "options"), (ollama_fields.response_format, "xml", "format"),
    (ollama_fields.messages, [{"role": "user", "content": "x", "images": ["aGk="]}], "messages[0].images"),
    (ollama_fields.messages, [{"role": "user", "tool_calls": [{"function": {}}]}],
     "messages[0].tool_calls[0].function"),
])
def test_refusals_name_the_ollama_field(check, value, field):
    name = field.split(".")[0].split("[")[0]
    with pytest.raises(RequestError) as err:
        check(name, value)
    assert err.value.param == field


def test_a_bad_sampling_option_is_named_under_options():
    with pytest.raises(RequestError) as err:
        ollama_fields.parsed("m", [{"role": "user", "content": "x"}],
                             {"options": ollama_fields.options("options", {"top_k": -2})}, stream=False)
    assert err.value.param == "options.top_k" and str(err.value).startswith("options.top_k:")
