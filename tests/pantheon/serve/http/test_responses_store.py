"""Stored Responses over HTTP with the official `openai` client: previous_response_id continues the stored
conversation (checked against the engine and the chat route), retrieve / input_items / delete / cancel."""

import sqlite3

import openai
import pytest

from pantheon.serve.settings import RESPONSE_ID_HEADER
from tests.pantheon.serve.http.server import CHAT_N_CTX, call, named_events, stored_served

N_CTX = CHAT_N_CTX
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TOOLS = [{"type": "function", "name": "count", "description": "Count things.", "parameters": SCHEMA}]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """qwen2 under Qwen2.5's template, with a store."""
    server = stored_served(tmp_path_factory.mktemp("store"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(kept):
    return openai.OpenAI(base_url=kept.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def prompts(kept):
    return kept.backend.served("qwen2").prompts


def create(client, **kwargs):
    return client.responses.create(**dict(dict(model="qwen2", max_output_tokens=4, temperature=0), **kwargs))


def test_a_continued_response_answers_the_stored_conversation(client, prompts, greedy, engine_model):
    first = create(client, instructions="Be brief.", input="Name a colour.")
    assert first.store is True and first.previous_response_id is None
    second = create(client, input="Another one?", previous_response_id=first.id)
    # the instructions of a stored response are not carried over (as OpenAI documents)
    ids = prompts.encode_chat(prompts.render([{"role": "user", "content": "Name a colour."},
                                              {"role": "assistant", "content": first.output_text},
                                              {"role": "user", "content": "Another one?"}]))
    assert second.previous_response_id == first.id and second.usage.input_tokens == len(ids)
    assert second.output_text == engine_model.tokenizer.decode(greedy(ids, 4))
    counted = client.responses.input_tokens.count(model="qwen2", input="Another one?", previous_response_id=first.id)
    assert counted.input_tokens == len(ids)


def test_a_chain_of_turns_grows_by_each_turn(client, prompts):
    turns, previous, talk = ["One.", "Two.", "Three."], None, []
    for text in turns:
        got = create(client, input=text, previous_response_id=previous)
        talk += [{"role": "user", "content": text}]
        assert got.usage.input_tokens == len(prompts.encode_chat(prompts.render(talk)))
        talk += [{"role": "assistant", "content": got.output_text}]
        previous = got.id


def test_a_function_call_is_answered_by_its_output_alone(client):
    called = create(client, input="Count the apples.", tools=TOOLS, max_output_tokens=40,
                    tool_choice={"type": "function", "name": "count"})
    call_item = called.output[-1]
    assert call_item.type == "function_call"
    again = create(client, previous_response_id=called.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call_item.call_id, "output": "3"}])
    chat = client.chat.completions.create(model="qwen2", max_tokens=4, temperature=0, tools=[
        {"type": "function", "function": {k: TOOLS[0][k] for k in ("name", "description", "parameters")}}], messages=[
        {"role": "user", "content": "Count the apples."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": call_item.call_id, "type": "function", "function": {
            "name": "count", "arguments": call_item.arguments}}]},
        {"role": "tool", "tool_call_id": call_item.call_id, "content": "3"}])
    assert again.usage.input_tokens == chat.usage.prompt_tokens
    assert again.output_text == chat.choices[0].message.content


def test_a_stored_response_is_retrieved_as_it_was_answered(client, kept):
    got = create(client, input="Hi", metadata={"k": "v"})
    assert client.responses.retrieve(got.id).model_dump() == got.model_dump()
    status, events = named_events(kept.port, "/v1/responses", {"model": "qwen2", "input": "Hi", "max_output_tokens": 3,
                                                                "stream": True})
    final = events[-1][1]["response"]
    assert status == 200 and final["store"] is True
    assert call(kept.port, "GET", f"/v1/responses/{final['id']}")[2] == final


def test_input_items_list_the_requests_own_items_in_pages(client):
    inputs = [{"role": "user", "content": f"Item {k}."} for k in range(3)]
    first = create(client, input="Before.")
    got = create(client, input=inputs, previous_response_id=first.id)
    listed = client.responses.input_items.list(got.id, order="asc")
    assert [item.content[0].text for item in listed.data] == ["Item 0.", "Item 1.", "Item 2."]
    assert all(item.id.startswith("msg_") and item.type == "message" and item.role == "user" for item in listed.data)
    assert [i.id for i in client.responses.input_items.list(got.id).data] == [i.id for i in listed.data[::-1]]
    page = client.responses.input_items.list(got.id, order="asc", limit=2)
    assert [i.id for i in page.data] == [i.id for i in listed.data[:2]] and page.has_more
    rest = client.responses.input_items.list(got.id, order="asc", limit=2, after=page.last_id)
    assert [i.id for i in rest.data] == [listed.data[2].id] and not rest.has_more


@pytest.mark.parametrize("query, param", [("limit=0", "limit"), ("limit=101", "limit"), ("limit=x", "limit"),
                                          ("order=sideways", "order"), ("after=msg_nope", "after"),
                                          ("limit=%C2%B2", "limit"), ("limit=%D9%A3", "limit"),
                                          ("limit=1&limit=2", "limit"), ("order=asc&order=desc", "order")])
def test_a_bad_input_items_query_is_a_400_naming_it(client, kept, query, param):
    got = create(client, input="Hi")
    status, _, answer = call(kept.port, "GET", f"/v1/responses/{got.id}/input_items?{query}")
    assert status == 400 and answer["error"]["param"] == param, answer


def test_store_false_keeps_nothing(client):
    got = create(client, input="Hi", store=False)
    assert got.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(got.id)
    with pytest.raises(openai.NotFoundError) as err:
        create(client, input="Again", previous_response_id=got.id)
    assert err.value.body["code"] == "previous_response_not_found"
    assert err.value.body["param"] == "previous_response_id" and got.id in err.value.body["message"]


def test_a_deleted_response_is_gone_and_so_is_the_chain_through_it(client, kept):
    first = create(client, input="One.")
    second = create(client, input="Two.", previous_response_id=first.id)
    status, _, answer = call(kept.port, "DELETE", f"/v1/responses/{first.id}")
    assert status == 200 and answer == {"id": first.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError) as err:
        create(client, input="Three.", previous_response_id=second.id)
    assert first.id in err.value.body["message"]  # the missing link is named
    assert client.responses.retrieve(second.id).id == second.id


def test_cancel_is_refused_for_a_stored_response_and_404_for_an_unknown_one(client):
    got = create(client, input="Hi")
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.cancel(got.id)
    assert "background" in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")


def rows(store):
    with sqlite3.connect(store.path) as db:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


@pytest.mark.parametrize("body, param", [({"input": []}, "input"), ({"input": "x", "previous_response_id": 7},
                                                                       "previous_response_id"),
                                         ({"input": "x", "max_output_tokens": 0}, "max_output_tokens")])
def test_a_bad_request_stores_nothing(kept, body, param):
    before = rows(kept.store)
    status, _, answer = call(kept.port, "POST", "/v1/responses", dict(body, model="qwen2", store=True))
    assert status == 400 and answer["error"]["param"] == param
    assert rows(kept.store) == before


@pytest.mark.parametrize("raw_id", ['"\\ud800"', '""', '"' + "r" * 200_000 + '"', '"resp_\\u0000"'])
def test_a_hostile_previous_id_is_a_404_of_bounded_size(kept, raw_id):
    raw = '{"model": "qwen2", "input": "x", "max_output_tokens": 2, "previous_response_id": %s}' % raw_id
    status, _, answer = call(kept.port, "POST", "/v1/responses", raw=raw)
    assert status == 404 and answer["error"]["code"] == "previous_response_not_found", answer
    assert len(answer["error"]["message"]) < 400


@pytest.mark.parametrize("path", ["%ED%A0%80", "%00", "r" * 4000])
def test_a_hostile_path_id_is_a_404_of_bounded_size(kept, path):
    for method, suffix in (("GET", ""), ("DELETE", ""), ("GET", "/input_items"), ("POST", "/cancel")):
        status, _, answer = call(kept.port, method, f"/v1/responses/{path}{suffix}")
        assert status == 404 and answer["error"]["param"] == "response_id", (method, suffix, answer)
        assert len(answer["error"]["message"]) < 400


def test_a_stored_answer_names_its_id_in_a_header_for_the_router(kept):
    body = {"model": "qwen2", "input": "Hi", "max_output_tokens": 2}
    for extra, stored in (({}, True), ({"stream": True}, True), ({"store": False}, False)):
        status, headers, answer = call(kept.port, "POST", "/v1/responses", dict(body, **extra))
        named = headers.get(RESPONSE_ID_HEADER)
        assert status == 200 and (named is not None) == stored
        if stored and not extra:
            assert named == answer["id"]
