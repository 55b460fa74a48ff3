"""Anthropic's request fields restated as chat fields: blocks as OpenAI messages, thinking, tools, refusals."""

import pytest

from pantheon.serve.http import anthropic_fields as fields
from pantheon.serve.http import validate
from pantheon.serve.http.completions import generation_request
from pantheon.serve.http.errors import RequestError


def checked(body):
    return validate.fields(dict(body, model="m"), fields.MESSAGES, ("model", "max_tokens", "messages"))


USER = [{"role": "user", "content": "hi"}]


def test_blocks_become_openai_messages_with_tool_results_ahead_of_the_turns_text():
    out = fields.messages("messages", [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                          {"type": "redacted_thinking", "data": "x"},
                                          {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                      "content": [{"type": "text", "text": "co"}, {"type": "text", "text": "ld"}]},
                                     {"type": "text", "text": "so?"}]}])
    call = {"id": "t1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}}
    assert out == [{"role": "assistant", "content": "", "reasoning_content": "hmm", "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "t1", "content": "cold"},
                   {"role": "user", "content": "so?"}]


def test_thinking_budget_tools_choice_stops_user_and_format_reach_the_chat_request():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    parsed, prefill = fields.parsed(checked({
        "max_tokens": 9, "messages": USER, "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "stop_sequences": ["\n\n"], "top_k": 4,
        "tools": [{"name": "w", "input_schema": schema, "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True}, "metadata": {"user_id": "u7"},
        "output_config": {"format": {"type": "json_schema", "schema": schema}, "effort": "low"},
        "cache_control": {"type": "ephemeral"}, "service_tier": "auto"}))
    assert prefill == "" and parsed.messages[0] == {"role": "system", "content": "A\nB"}
    assert parsed.reasoning_budget == 1024 and parsed.template_kwargs == {"enable_thinking": True}
    assert parsed.max_tokens == 9 and parsed.stop == ("\n\n",) and parsed.sampling["top_k"] == 4
    assert parsed.tools == [{"type": "function", "function": {"name": "w", "parameters": schema}}]
    assert parsed.tool_choice == "required" and parsed.parallel_tool_calls is False and parsed.user == "u7"
    assert parsed.response_format["json_schema"]["schema"] == schema


@pytest.mark.parametrize("thinking, enabled", [({"type": "disabled"}, False), ({"type": "adaptive"}, True)])
def test_thinking_without_a_budget_leaves_the_models(thinking, enabled):
    parsed, _ = fields.parsed(checked({"max_tokens": 9, "messages": USER, "thinking": thinking}))
    assert parsed.template_kwargs == {"enable_thinking": enabled} and parsed.reasoning_budget == 0


def test_a_named_tool_choice_is_openais_function_choice_and_a_final_assistant_turn_a_prefill():
    parsed, prefill = fields.parsed(checked({"max_tokens": 9, "tool_choice": {"type": "tool", "name": "w"},
                                             "messages": USER + [{"role": "assistant", "content": "Sure:"}],
                                             "tools": [{"name": "w", "input_schema": {"type": "object"}}]}))
    assert parsed.tool_choice == {"type": "function", "function": {"name": "w"}}
    assert prefill == "Sure:" and parsed.messages == USER


def test_the_requests_budget_is_the_generations():
    class Served:
        n_ctx, name, max_choices = 64, "m", 1

        class tokenizer:
            stop_ids, n_vocab = (2,), 100

    parsed, _ = fields.parsed(checked({"max_tokens": 4, "messages": USER,
                                       "thinking": {"type": "enabled", "budget_tokens": 3}}))
    assert generation_request(Served, parsed, [1, 5], None, 16).reasoning_budget == 3


@pytest.mark.parametrize("body, field", [
    ({"stop_sequences": ["a"] * 33}, "stop_sequences"),
    ({"metadata": {"user_id": 5}}, "metadata.user_id"),
    ({"thinking": {"type": "enabled", "budget_tokens": 8, "display": "loud"}}, "thinking.display"),
    ({"output_config": {"format": {"type": "regex", "schema": {}}}}, "output_config.format"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"tools": [{"name": "w"}]}, "tools[0].input_schema"),
    ({"tools": [{"name": "w", "input_schema": {}, "color": "red"}]}, "tools[0].color"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": []}]}]},
     "messages[0].content[0].input"),
    ({"messages": [{"role": "user", "content": "x", "name": "n"}]}, "messages[0].name"),
    ({"system": [{"type": "tool_result", "tool_use_id": "a"}]}, "system"),
    ({"temperature": "hot"}, "temperature"),
])
def test_bad_fields_are_named_as_sent(body, field):
    with pytest.raises(RequestError) as err:
        fields.parsed(checked(dict({"max_tokens": 4, "messages": USER}, **body)))
    assert str(err.value).startswith(field + ":") and err.value.status == 400


@pytest.mark.parametrize("role", [[], {"a": 1}])
def test_an_unhashable_role_is_a_400_naming_it(role):
    """A JSON list or object as a role (its dict lookup raised TypeError: a 500 the hostile fuzz found)."""
    with pytest.raises(RequestError) as err:
        checked({"max_tokens": 1, "messages": [{"role": role, "content": ""}]})
    assert err.value.param == "messages[0].role"
