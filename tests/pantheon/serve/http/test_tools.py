"""Tools over HTTP on a golden model given a tool-capable template (Qwen 2.5's, like --chat-template-file)."""

import json

import openai
import pytest

from tests.pantheon.serve.http.server import call

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
NO_EOS = {"2": -100}
N_CTX = 512  # the conftest's qwen server: room for a tool-calling prompt


@pytest.fixture(scope="module")
def client(qwen):
    return openai.OpenAI(base_url=qwen.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_tools_reach_the_template_and_none_keeps_them_out(client):
    with_tools = client.chat.completions.create(model="qwen2", messages=USER, tools=[WEATHER], max_tokens=1)
    without = client.chat.completions.create(model="qwen2", messages=USER, tools=[WEATHER], tool_choice="none",
                                             max_tokens=1)
    assert with_tools.usage.prompt_tokens > without.usage.prompt_tokens + 20


def test_a_named_tool_choice_forces_that_call(client):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    out = client.chat.completions.create(model="qwen2", messages=USER, tools=[WEATHER, TIME], tool_choice=choice,
                                         max_tokens=12, temperature=0, extra_body={"logit_bias": NO_EOS})
    message = out.choices[0].message
    assert message.content is None and len(message.tool_calls) == 1
    assert message.tool_calls[0].function.name == "get_weather" and message.tool_calls[0].id.startswith("call_")
    streamed = client.chat.completions.create(model="qwen2", messages=USER, tools=[WEATHER, TIME],
                                              tool_choice=choice, max_tokens=12, temperature=0, stream=True,
                                              extra_body={"logit_bias": NO_EOS})
    name, args, content = "", "", ""
    for chunk in streamed:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for c in delta.tool_calls or ():
            assert c.index == 0
            name += c.function.name or ""
            args += c.function.arguments or ""
    assert (content, name, args) == ("", "get_weather", message.tool_calls[0].function.arguments)


def test_required_forces_some_call(client):
    out = client.chat.completions.create(model="qwen2", messages=USER, tools=[WEATHER], tool_choice="required",
                                         max_tokens=8, temperature=0, extra_body={"logit_bias": NO_EOS})
    message = out.choices[0].message  # the reply starts inside a call: no text leaks into content
    assert message.tool_calls is not None or message.content == ""


def test_a_tool_choice_outside_the_tools_is_400(qwen):
    body = {"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    status, _, payload = call(qwen.port, "POST", "/v1/chat/completions", body)
    assert status == 400 and payload["error"]["param"] == "tool_choice"
    status, _, payload = call(qwen.port, "POST", "/v1/chat/completions", dict(body, tool_choice="sometimes"))
    assert status == 400 and payload["error"]["param"] == "tool_choice"


def test_a_tool_result_turn_renders_with_string_arguments(client):
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"celsius": 21})}]
    out = client.chat.completions.create(model="qwen2", messages=history, tools=[WEATHER], max_tokens=2)
    assert out.usage.prompt_tokens > 40
