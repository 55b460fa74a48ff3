"""Responses input items folded into chat messages, and the chat body the checked fields stand for."""

import pytest

from pantheon.serve.http import validate
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.responses_fields import RESPONSES, chat_body, input_items, parsed


def _call(call_id, name="f"):
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def test_a_string_is_one_user_message():
    assert input_items("input", "Hi") == [{"role": "user", "content": "Hi"}]


def test_reasoning_joins_the_next_assistant_turn_and_parallel_calls_join_one_turn():
    items = [{"role": "user", "content": "Go"},
             {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}],
              "content": [{"type": "reasoning_text", "text": "Think "}, {"type": "reasoning_text", "text": "hard."}]},
             _call("a"), _call("b", "g"),
             {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "1"}]},
             {"type": "function_call_output", "call_id": "b", "output": "2"},
             {"type": "reasoning", "summary": [{"type": "summary_text", "text": "One."},
                                               {"type": "summary_text", "text": "Two."}], "encrypted_content": "x"},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Done"},
                                               {"type": "refusal", "refusal": "."}]}]
    assert input_items("input", items) == [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "", "reasoning_content": "Think hard.", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "One.\n\nTwo."}]


def test_a_call_after_an_assistant_message_joins_that_message():
    items = [{"role": "user", "content": "Go"}, {"role": "assistant", "content": "Calling."}, _call("a")]
    assert input_items("input", items)[-1]["tool_calls"][0]["id"] == "a"
    assert len(input_items("input", items)) == 2


def test_the_chat_body_restates_each_field():
    values = {"model": "m", "instructions": "Be brief.", "input": [{"role": "user", "content": "Hi"}],
              "max_output_tokens": 9, "temperature": 0.5, "user": "conv-1", "prompt_cache_key": "shared",
              "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
              "tool_choice": {"type": "function", "name": "f"}, "top_logprobs": 3, "reasoning": {"effort": "low"},
              "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}}}
    body = chat_body(values)
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert (body["max_tokens"], body["temperature"], body["user"]) == (9, 0.5, "conv-1")
    assert body["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "out", "schema": {"type": "object"}}}
    assert (body["logprobs"], body["top_logprobs"]) == (True, 3)
    out = parsed(values)
    assert out.max_tokens == 9 and out.user == "conv-1" and out.logprobs == 3
    assert body["reasoning_effort"] == "low" and out.template_kwargs == {"reasoning_effort": "low"}
    assert "user" not in chat_body({"input": values["input"], "prompt_cache_key": "shared"})



@pytest.mark.parametrize("body, field", [
    ({"input": [{"type": []}]}, "input[0].type"),
    ({"input": [{"type": {"a": 1}}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": ["input_text"]}]}]}, "input[0].content[0].type"),
    ({"input": "x", "text": {"format": {"type": []}}}, "text.format.type"),
])
def test_an_unhashable_type_is_a_400_naming_it(body, field):
    """A JSON list or object where a type name goes (a dict lookup of it raised TypeError: a 500)."""
    with pytest.raises(RequestError) as err:
        validate.fields(body, RESPONSES, ())
    assert err.value.param == field
