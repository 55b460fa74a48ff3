"""Anthropic's Messages API (/v1/messages): the official `anthropic` client, answers checked against the engine."""

import json

import pytest

from pantheon.serve.http.anthropic import _Reply
from pantheon.serve.http.choices import Choice
from pantheon.serve.http.shapes import usage
from pantheon.serve.http.stops import StopMatcher
from pantheon.text.chat_output import ChatOutput
from tests.pantheon.serve.http.server import CHAT_N_CTX, Served, call, named_events, open_models

anthropic = pytest.importorskip("anthropic", reason="the anthropic client is a test dependency (setup.cfg [test])")

N_CTX = CHAT_N_CTX
GREEDY = {"temperature": 0}  # the client no longer takes sampling fields (newer Claude models refuse them)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
TOOLS = [{"name": "count", "description": "Count things.", "input_schema": SCHEMA}]
OPENAI_TOOLS = [{"type": "function", "function": {"name": "count", "parameters": SCHEMA,
                                                   "description": "Count things."}}]


@pytest.fixture(scope="module")
def client(qwen):
    return anthropic.Anthropic(base_url=qwen.url, api_key="unused", max_retries=0, timeout=60)



def sse(port, body):
    return named_events(port, "/v1/messages", body)


def test_a_message_is_the_engines_greedy_reply_to_the_rendered_conversation(client, prompts, greedy, engine_model):
    ids = prompts.encode_chat(prompts.render([{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Name a colour."}]))
    want = greedy(ids, 6)
    got = client.messages.create(model="qwen2", max_tokens=6, extra_body=GREEDY, system="Be brief.",
                                 messages=[{"role": "user", "content": "Name a colour."}])
    assert got.type == "message" and got.role == "assistant" and got.id.startswith("msg_")
    assert [b.type for b in got.content] == ["text"] and got.content[0].text == engine_model.tokenizer.decode(want)
    assert got.stop_reason == ("max_tokens" if len(want) == 6 else "end_turn") and got.stop_sequence is None
    assert got.usage.input_tokens + got.usage.cache_read_input_tokens == len(ids)
    assert got.usage.output_tokens == len(want)


def test_a_stream_is_anthropics_event_sequence_and_the_same_reply(qwen, client):
    body = {"model": "qwen2", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    status, events = sse(qwen.port, dict(body, **GREEDY))
    assert status == 200 and all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "content_block_start"] and names[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    whole = client.messages.create(**body, extra_body=GREEDY)
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == whole.content[0].text and events[-2][1]["delta"]["stop_reason"] == whole.stop_reason
    assert events[-2][1]["usage"]["output_tokens"] == whole.usage.output_tokens
    with client.messages.stream(**body, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text and final.stop_reason == whole.stop_reason


def test_a_stop_sequence_ends_the_reply_before_it_and_is_named(client):
    messages = [{"role": "user", "content": "Tell me a story."}]
    text = client.messages.create(model="qwen2", max_tokens=16, extra_body=GREEDY, messages=messages).content[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    assert stop.strip(), text
    got = client.messages.create(model="qwen2", max_tokens=16, extra_body=GREEDY, messages=messages,
                                 stop_sequences=[stop, "\u2603never"])
    assert got.stop_reason == "stop_sequence" and got.stop_sequence == stop
    assert got.content[0].text == text[:text.index(stop)]


def test_tool_blocks_render_as_the_openai_conversation_and_count_tokens_agrees(client, prompts):
    anthropic_messages = [
        {"role": "user", "content": [{"type": "text", "text": "How many?", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Counting."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "count", "input": {"n": 3}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "three"},
                                     {"type": "text", "text": "And now?"}]}]
    openai_messages = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "How many?"},
                       {"role": "assistant", "content": "Counting.", "tool_calls": [
                           {"id": "toolu_1", "type": "function", "function": {"name": "count",
                                                                              "arguments": "{\"n\": 3}"}}]},
                       {"role": "tool", "tool_call_id": "toolu_1", "content": "three"},
                       {"role": "user", "content": "And now?"}]
    counted = client.messages.count_tokens(model="qwen2", system=[{"type": "text", "text": "Be exact."}],
                                           messages=anthropic_messages, tools=TOOLS)
    rendered = prompts.render(openai_messages, OPENAI_TOOLS)
    assert "three" in rendered and counted.input_tokens == len(prompts.encode_chat(rendered))


def test_a_forced_tool_is_a_tool_use_block_with_an_input_object(client):
    messages = [{"role": "user", "content": "Count the apples."}]
    kwargs = dict(model="qwen2", max_tokens=40, extra_body=GREEDY, messages=messages, tools=TOOLS,
                  tool_choice={"type": "tool", "name": "count"})
    got = client.messages.create(**kwargs)
    assert got.stop_reason == "tool_use" and got.content[-1].type == "tool_use", got
    call = got.content[-1]
    assert call.name == "count" and set(call.input) == {"n"} and isinstance(call.input["n"], int)
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == call.input


def test_an_assistant_prefill_is_continued(client, prompts, greedy, engine_model):
    messages = [{"role": "user", "content": "Say a number."}, {"role": "assistant", "content": "The number is"}]
    ids = prompts.encode_chat(prompts.render(messages[:1]) + "The number is")
    want = greedy(ids, 5)
    got = client.messages.create(model="qwen2", max_tokens=5, extra_body=GREEDY, messages=messages)
    assert got.content[0].text == engine_model.tokenizer.decode(want)
    assert got.usage.input_tokens + got.usage.cache_read_input_tokens == len(ids)


@pytest.mark.parametrize("body, field", [
    ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages[0].content[0].text"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "all"}},
     "tool_choice.type"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "stop_sequences": "x"}, "stop_sequences"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "stop_sequences": [""]}, "stop_sequences"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"}},
     "thinking.budget_tokens"),
    ({"max_tokens": 4, "messages": [{"role": "assistant", "content": "x"}]}, "messages"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "top_k": -3}, "top_k"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
])
def test_bad_fields_are_anthropic_shaped_400s_naming_the_field(qwen, body, field):
    status, _, answer = call(qwen.port, "POST", "/v1/messages", dict(body, model="qwen2"))
    assert status == 400 and answer["type"] == "error", answer
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["message"].startswith(field + ":")


def test_an_unknown_model_is_a_not_found_error(served):
    """(Where one model is served, any name reaches it, as llama-server does: two are served here.)"""
    client = anthropic.Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    assert err.value.body["error"]["type"] == "not_found_error" and "nope" in err.value.body["error"]["message"]


def test_an_api_key_in_x_api_key_is_accepted_and_a_wrong_one_is_an_authentication_error():
    server = Served(open_models(("qwen2",)), api_keys=("sesame",))
    try:
        good = anthropic.Anthropic(base_url=server.url, api_key="sesame", max_retries=0, timeout=60)
        got = good.messages.create(model="qwen2", max_tokens=2, messages=[{"role": "user", "content": "x"}])
        assert got.usage.output_tokens >= 1
        bad = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0, timeout=60)
        with pytest.raises(anthropic.AuthenticationError) as err:
            bad.messages.create(model="qwen2", max_tokens=2, messages=[{"role": "user", "content": "x"}])
        assert err.value.body["error"]["type"] == "authentication_error"
    finally:
        server.close()


class _Gen:
    """A finished generation's text pieces, as a Generation hands them out."""

    def __init__(self, pieces, reason="stop"):
        self._pieces, self.finish_reason, self.stops = pieces, reason, StopMatcher()
        self.usage = usage(5, 3, 2)

    def pieces(self):
        yield from self._pieces

    def cancel(self):
        pass


def test_reasoning_is_a_thinking_block_before_the_text_whole_and_streamed():
    """A reply that starts inside <think> (the template opened it): its thinking block, then its text."""
    def reply():
        choice = Choice(0, _Gen(["Let me ", "see.</think>", "Blue", "."]), ChatOutput(thinking=True))
        return _Reply(type("Served", (), {"name": "m"}), choice, 5)
    whole = reply().whole()
    assert whole["content"] == [{"type": "thinking", "thinking": "Let me see.", "signature": ""},
                                {"type": "text", "text": "Blue."}]
    assert whole["stop_reason"] == "end_turn" and whole["usage"] == {
        "input_tokens": 3, "output_tokens": 3, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 0}
    events = [json.loads(block.split(b"\ndata: ")[1]) for block in reply().events()]
    kinds = [(e["type"], e.get("index"), e.get("content_block", e.get("delta", {})).get("type")) for e in events]
    assert kinds[0] == ("message_start", None, None) and kinds[-2:] == [("message_delta", None, None),
                                                                         ("message_stop", None, None)]
    blocks = kinds[1:-2]
    assert blocks[0] == ("content_block_start", 0, "thinking") and blocks[-1] == ("content_block_stop", 1, None)
    assert ("content_block_stop", 0, None) in blocks and ("content_block_start", 1, "text") in blocks
    thinking = "".join(e["delta"]["thinking"] for e in events if e.get("delta", {}).get("type") == "thinking_delta")
    text = "".join(e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta")
    assert (thinking, text) == ("Let me see.", "Blue.")
