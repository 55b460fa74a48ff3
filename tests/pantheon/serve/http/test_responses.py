"""OpenAI's Responses API (/v1/responses): the official `openai` client, answers checked against the engine."""

import itertools
import json

import openai
import pydantic
import pytest

from pantheon.serve.http.choices import Choice
from pantheon.serve.http.responses import _Reply
from pantheon.serve.http.shapes import usage
from pantheon.serve.http.stops import StopMatcher
from pantheon.text.chat_output import ChatOutput
from tests.pantheon.serve.http.server import CHAT_N_CTX, call, named_events

N_CTX = CHAT_N_CTX
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
TOOLS = [{"type": "function", "name": "count", "description": "Count things.", "parameters": SCHEMA}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "count", "description": "Count things.", "parameters": SCHEMA}}]


@pytest.fixture(scope="module")
def client(qwen):
    return openai.OpenAI(base_url=qwen.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def sse(port, body):
    return named_events(port, "/v1/responses", body)


def _runs(names):
    return [name for name, _ in itertools.groupby(names)]


def test_a_response_is_the_engines_greedy_reply_to_the_rendered_conversation(client, prompts, greedy, engine_model):
    ids = prompts.encode_chat(prompts.render([{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Name a colour."}]))
    want = greedy(ids, 6)
    got = client.responses.create(model="qwen2", instructions="Be brief.", input="Name a colour.",
                                  max_output_tokens=6, temperature=0, metadata={"k": "v"})
    assert got.object == "response" and got.id.startswith("resp_") and got.model == "qwen2"
    assert [item.type for item in got.output] == ["message"] and got.output[0].role == "assistant"
    assert got.output_text == engine_model.tokenizer.decode(want)
    assert got.status == ("incomplete" if len(want) == 6 else "completed") and got.metadata == {"k": "v"}
    if got.status == "incomplete":
        assert got.incomplete_details.reason == "max_output_tokens"
    assert got.usage.input_tokens == len(ids) and got.usage.output_tokens == len(want)
    assert got.usage.total_tokens == len(ids) + len(want) and got.usage.output_tokens_details.reasoning_tokens == 0


def test_input_items_render_as_the_chat_conversation_and_input_tokens_agrees(client, prompts):
    items = [{"role": "developer", "content": "Be exact."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "How many?"}]},
             {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
              "content": [{"type": "output_text", "text": "Counting.", "annotations": []}]},
             {"type": "function_call", "call_id": "call_1", "name": "count", "arguments": "{\"n\": 3}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "three"},
             {"role": "user", "content": "And now?"}]
    chat = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "How many?"},
            {"role": "assistant", "content": "Counting.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "count", "arguments": "{\"n\": 3}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "three"}, {"role": "user", "content": "And now?"}]
    counted = client.responses.input_tokens.count(model="qwen2", input=items, tools=TOOLS)
    rendered = prompts.render(chat, CHAT_TOOLS)
    assert "three" in rendered and counted.object == "response.input_tokens"
    assert counted.input_tokens == len(prompts.encode_chat(rendered))


def test_a_stream_is_the_responses_event_sequence_and_the_same_reply(qwen, client):
    body = {"model": "qwen2", "input": "Hi", "max_output_tokens": 8, "temperature": 0}
    status, events = sse(qwen.port, body)
    assert status == 200 and all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    whole = client.responses.create(**body)
    names = [name for name, _ in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          f"response.{whole.status}"]
    assert set(names[4:-4]) == {"response.output_text.delta"}
    text = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
    final = events[-1][1]["response"]
    assert text == whole.output_text == final["output"][0]["content"][0]["text"] == events[-4][1]["text"]
    assert final["usage"]["output_tokens"] == whole.usage.output_tokens
    assert final["id"] == events[0][1]["response"]["id"]
    with client.responses.stream(**body) as stream:  # the client's own accumulator checks every event's place
        kinds = [event.type for event in stream]
    assert _runs(kinds) == _runs(names)  # how many deltas carry the text depends on timing


def test_a_forced_function_call_is_a_function_call_item_and_its_output_goes_back_in(client):
    kwargs = dict(model="qwen2", input="Count the apples.", max_output_tokens=40, temperature=0, tools=TOOLS,
                  tool_choice={"type": "function", "name": "count"})
    got = client.responses.create(**kwargs)
    assert got.status == "completed" and got.output[-1].type == "function_call", got
    call = got.output[-1]
    assert call.name == "count" and call.call_id and set(json.loads(call.arguments)) == {"n"}
    with client.responses.stream(**kwargs) as stream:
        final = stream.get_final_response()
    assert final.output[-1].type == "function_call" and final.output[-1].arguments == call.arguments
    again = client.responses.create(model="qwen2", max_output_tokens=4, temperature=0, tools=TOOLS, input=[
        {"role": "user", "content": "Count the apples."}, *got.output,
        {"type": "function_call_output", "call_id": call.call_id, "output": "3"}])
    assert again.status in ("completed", "incomplete") and again.usage.input_tokens > got.usage.input_tokens


class Count(pydantic.BaseModel):
    n: int


def test_a_json_schema_format_is_followed_and_the_client_parses_it(client):
    got = client.responses.create(model="qwen2", input="A number?", max_output_tokens=40, temperature=0,
                                  text={"format": {"type": "json_schema", "name": "count", "schema": SCHEMA}})
    assert got.status == "completed" and isinstance(json.loads(got.output_text)["n"], int)
    parsed = client.responses.parse(model="qwen2", input="A number?", max_output_tokens=40, temperature=0,
                                    text_format=Count)
    assert isinstance(parsed.output_parsed, Count)


def test_logprobs_are_the_chat_routes_logprobs_of_the_same_tokens(qwen, client):
    got = client.responses.create(model="qwen2", input="Hi", max_output_tokens=5, temperature=0, top_logprobs=2,
                                  include=["message.output_text.logprobs"])
    chat = openai.OpenAI(base_url=qwen.url + "/v1", api_key="unused", max_retries=0).chat.completions.create(
        model="qwen2", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, logprobs=True,
        top_logprobs=2)
    scores = got.output[0].content[0].logprobs
    want = chat.choices[0].logprobs.content
    assert len(scores) == got.usage.output_tokens == len(want)
    assert [(s.token, round(s.logprob, 4), len(s.top_logprobs)) for s in scores] == [
        (w.token, round(w.logprob, 4), 2) for w in want]
    status, events = sse(qwen.port, {"model": "qwen2", "input": "Hi", "max_output_tokens": 5, "temperature": 0,
                                     "top_logprobs": 2})
    streamed = [s for name, data in events if name == "response.output_text.delta" for s in data["logprobs"]]
    assert [s["token"] for s in streamed] == [s.token for s in scores]


@pytest.mark.parametrize("body, field", [
    ({}, "input"),
    ({"input": []}, "input"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "truncation": "middle"}, "truncation"),
    ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"input": "x", "include": ["file_search_call.results"]}, "include"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
    ({"input": [{"role": "user", "content": "x", "extra": 1}]}, "input[0].extra"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"input": "x", "tool_choice": "any"}, "tool_choice"),
    ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema"),
    ({"input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ({"input": "x", "top_logprobs": 99}, "top_logprobs"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
])
def test_bad_fields_are_400s_naming_the_field(qwen, body, field):
    status, _, answer = call(qwen.port, "POST", "/v1/responses", dict(body, model="qwen2"))
    assert status == 400 and answer["error"]["param"] == field, answer
    assert answer["error"]["message"].startswith(field + ":")


def test_an_unknown_model_is_a_404(served):
    """(Where one model is served, any name reaches it, as llama-server does: two are served here.)"""
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="nope", input="x", max_output_tokens=2)
    assert "nope" in err.value.body["message"]


def test_stored_response_routes_are_404s_saying_nothing_is_stored(client, qwen):
    for fetch in (lambda: client.responses.retrieve("resp_1"), lambda: client.responses.delete("resp_1"),
                  lambda: client.responses.input_items.list("resp_1"), lambda: client.responses.cancel("resp_1")):
        with pytest.raises(openai.NotFoundError) as err:
            fetch()
        assert "stores no responses" in err.value.body["message"] and err.value.body["param"] == "response_id"
    assert call(qwen.port, "POST", "/v1/responses/input_tokens", {"input": "x"})[0] == 200


class _Gen:
    """A finished generation's text pieces and ids, as a Generation hands them out."""

    def __init__(self, pieces, ids, reason="stop"):
        self._pieces, self.token_ids, self.finish_reason, self.stops = pieces, ids, reason, StopMatcher()
        self.usage, self.scores = usage(5, len(ids), 2), []

    def pieces(self):
        yield from self._pieces

    def cancel(self):
        pass


def test_reasoning_is_a_reasoning_item_before_the_message_whole_and_streamed():
    """A reply that starts inside <think> (the template opened it): its reasoning item, then its message;
    the reasoning tokens are those up to and with </think> (id 9 here)."""
    served = type("Served", (), {"name": "m", "think_ids": (8, 9)})

    def reply():
        choice = Choice(0, _Gen(["Let me ", "see.</think>", "Blue", "."], [1, 2, 9, 3, 4]), ChatOutput(thinking=True))
        return _Reply(served, choice, {})
    whole = reply().whole()
    assert [item["type"] for item in whole["output"]] == ["reasoning", "message"]
    assert whole["output"][0]["content"] == [{"type": "reasoning_text", "text": "Let me see."}]
    assert whole["output"][1]["content"][0]["text"] == "Blue." and whole["status"] == "completed"
    assert whole["usage"] == {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 5,
                              "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 10}
    events = [json.loads(block.split(b"\ndata: ")[1]) for block in reply().events()]
    kinds = [(e["type"], e.get("output_index")) for e in events]
    assert kinds[:4] == [("response.created", None), ("response.in_progress", None),
                         ("response.output_item.added", 0), ("response.content_part.added", 0)]
    assert ("response.output_item.done", 0) in kinds and ("response.output_item.added", 1) in kinds
    assert kinds[-1] == ("response.completed", None)
    thinking = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert (thinking, text) == ("Let me see.", "Blue.")
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["reasoning", "message"]
