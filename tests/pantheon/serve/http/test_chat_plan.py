"""A chat's final assistant message starts the reply (llama-server's assistant prefill, vLLM's
continue_final_message), or is a finished turn (--no-prefill-assistant)."""

import json

import pytest

from pantheon.serve.http import chat_plan, validate
from pantheon.serve.http.errors import RequestError
from tests.pantheon.serve.http.server import CHAT_N_CTX, call, qwen_served

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (setup.cfg [test])")

N_CTX = CHAT_N_CTX
ASK = {"role": "user", "content": "Say a number."}
STARTED = {"role": "assistant", "content": "The number is"}


def parsed(messages, **fields):
    return validate.check({"messages": messages, **fields}, validate.CHAT, ("messages",))


def test_a_final_assistant_message_is_taken_off_as_the_start_of_the_reply():
    rest, prefill = chat_plan.final_prefill(parsed([ASK, STARTED]))
    assert rest.messages == [ASK] and prefill == "The number is"
    parts = dict(STARTED, content=[{"type": "text", "text": "The "}, {"type": "text", "text": "number"}])
    assert chat_plan.final_prefill(parsed([ASK, parts]))[1] == "The number"  # text parts joined, as llama-server
    assert chat_plan.final_prefill(parsed([ASK, dict(STARTED, content=None)])) == (parsed([ASK]), "")
    system = {"role": "system", "content": "Be brief."}
    assert chat_plan.final_prefill(parsed([system, STARTED])) == (parsed([system]), "The number is")  # as llama-server


@pytest.mark.parametrize("messages, enabled", [
    ([ASK], True),  # nothing to continue
    ([ASK, dict(STARTED, tool_calls=[{"id": "c", "type": "function",
                                      "function": {"name": "f", "arguments": "{}"}}])], True),  # a finished turn
    ([ASK, STARTED], False),  # --no-prefill-assistant
])
def test_what_is_not_a_prefill_is_left_as_it_is(messages, enabled):
    request = parsed(messages)
    assert chat_plan.final_prefill(request, enabled) == (request, "")


def test_continue_final_message_asks_for_it_whatever_the_server_says():
    rest, prefill = chat_plan.final_prefill(parsed([ASK, STARTED], continue_final_message=True,
                                                   add_generation_prompt=False), enabled=False)
    assert rest.messages == [ASK] and prefill == "The number is"
    assert parsed([ASK, STARTED], continue_final_message=True).continue_final  # add_generation_prompt left out


@pytest.mark.parametrize("messages, fields, param", [
    ([ASK, STARTED, STARTED], {}, "messages"),  # llama-server's rule: one assistant message at the end
    ([ASK], {"continue_final_message": True}, "continue_final_message"),  # nothing to continue
])
def test_a_prefill_that_cannot_be_is_a_400_naming_the_field(messages, fields, param):
    with pytest.raises(RequestError) as err:
        chat_plan.final_prefill(parsed(messages, **fields))
    assert err.value.param == param


@pytest.mark.parametrize("fields, param", [
    ({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message"),  # as vLLM
    ({"add_generation_prompt": False}, "add_generation_prompt"),  # a prompt without the assistant's turn
    ({"continue_final_message": "yes"}, "continue_final_message"),
])
def test_vllms_switches_in_combinations_not_served_are_400s(fields, param):
    with pytest.raises(RequestError) as err:
        parsed([ASK, STARTED], **fields)
    assert err.value.param == param


@pytest.fixture(scope="module")
def servers():
    on, off = qwen_served(N_CTX), qwen_served(N_CTX, prefill_assistant=False)
    yield on, off
    on.close()
    off.close()


def reply_of(server, body):
    status, _, out = call(server.port, "POST", "/v1/chat/completions", dict(
        {"model": "qwen2", "max_tokens": 5, "temperature": 0}, **body))
    assert status == 200, out
    return out


def test_the_reply_continues_the_final_assistant_message(servers, prompts, greedy, engine_model):
    """The prompt is the conversation before it, the assistant's turn opened, and its text (llama-server's),
    on /v1/chat/completions, Ollama's /api/chat and /apply-template; the reply does not repeat it."""
    on, _ = servers
    ids = prompts.encode_chat(prompts.render([ASK]) + STARTED["content"])
    want = engine_model.tokenizer.decode(greedy(ids, 5))
    out = reply_of(on, {"messages": [ASK, STARTED]})
    assert out["choices"][0]["message"]["content"] == want and out["usage"]["prompt_tokens"] == len(ids)
    vllm = reply_of(on, {"messages": [ASK, STARTED], "continue_final_message": True, "add_generation_prompt": False})
    assert vllm["choices"][0]["message"]["content"] == want
    status, _, ollama = call(on.port, "POST", "/api/chat", {"model": "qwen2", "messages": [ASK, STARTED],
                                                            "stream": False, "options": {"num_predict": 5,
                                                                                         "temperature": 0}})
    assert status == 200 and ollama["message"]["content"] == want
    status, _, applied = call(on.port, "POST", "/apply-template", {"messages": [ASK, STARTED]})
    assert status == 200 and applied["prompt"] == prompts.render([ASK]) + STARTED["content"]


def test_a_prefill_after_only_a_system_message_is_rendered_as_llama_server_renders_it(servers, prompts):
    """Nothing asked before it: the system turn, the assistant's turn opened, the prefill. With nothing at all
    before it the template decides (Qwen2.5's reads messages[0]: a typed 400 naming messages)."""
    on, _ = servers
    system = {"role": "system", "content": "Be brief."}
    status, _, applied = call(on.port, "POST", "/apply-template", {"messages": [system, STARTED]})
    assert status == 200 and applied["prompt"] == prompts.render([system]) + STARTED["content"]
    status, _, out = call(on.port, "POST", "/v1/chat/completions", {"model": "qwen2", "messages": [STARTED]})
    assert status == 400 and out["error"]["param"] == "messages"


def test_without_prefill_the_final_assistant_message_is_a_finished_turn(servers, prompts, greedy, engine_model):
    _, off = servers
    ids = prompts.encode_chat(prompts.render([ASK, STARTED]))
    out = reply_of(off, {"messages": [ASK, STARTED]})
    assert out["choices"][0]["message"]["content"] == engine_model.tokenizer.decode(greedy(ids, 5))
    assert out["usage"]["prompt_tokens"] == len(ids)
    forced = reply_of(off, {"messages": [ASK, STARTED], "continue_final_message": True,
                            "add_generation_prompt": False})  # a request still asks for it
    assert forced["usage"]["prompt_tokens"] == len(prompts.encode_chat(prompts.render([ASK]) + STARTED["content"]))


def test_a_prefill_that_opens_a_thought_is_continued_as_reasoning(servers, prompts, greedy, engine_model):
    """The reply starts inside the prefill's open think block: its text up to </think> is reasoning_content."""
    on, _ = servers
    thought = dict(STARTED, content="<think>\nLet me count")
    ids = prompts.encode_chat(prompts.render([ASK]) + thought["content"])
    want = engine_model.tokenizer.decode(greedy(ids, 5))
    assert "</think>" not in want
    message = reply_of(on, {"messages": [ASK, thought]})["choices"][0]["message"]
    assert message.get("reasoning_content") == want and not message["content"]
    closed = dict(STARTED, content="<think>\nTwo.</think>\n\nThe number is")
    message = reply_of(on, {"messages": [ASK, closed]})["choices"][0]["message"]
    assert not message.get("reasoning_content") and message["content"]  # closed in the prefill: an answer


def test_vllms_chat_echo_leads_the_reply_with_the_final_assistant_message(servers, prompts, greedy, engine_model):
    """echo true: the continued (or, without prefill, followed) assistant message's text leads the content,
    whole and streamed, past the reply's parser; a final user message is not echoed (vLLM's role rule)."""
    on, off = servers
    want = engine_model.tokenizer.decode(greedy(prompts.encode_chat(prompts.render([ASK]) + STARTED["content"]), 5))
    for body in ({"messages": [ASK, STARTED]},
                 {"messages": [ASK, STARTED], "continue_final_message": True, "add_generation_prompt": False}):
        echoed = reply_of(on, dict(body, echo=True))["choices"][0]["message"]["content"]
        assert echoed == STARTED["content"] + want
    status, _, streamed = call(on.port, "POST", "/v1/chat/completions", {
        "model": "qwen2", "messages": [ASK, STARTED], "max_tokens": 5, "temperature": 0, "echo": True,
        "stream": True, "n": 2})
    chunks = [json.loads(b[6:]) for b in streamed.split("\n\n") if b.startswith("data: {")]
    for i in (0, 1):
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c["choices"] and c["choices"][0]["index"] == i)
        assert status == 200 and text == STARTED["content"] + want
    after = engine_model.tokenizer.decode(greedy(prompts.encode_chat(prompts.render([ASK, STARTED])), 5))
    assert reply_of(off, {"messages": [ASK, STARTED], "echo": True})["choices"][0]["message"]["content"] == \
        STARTED["content"] + after
    alone = reply_of(on, {"messages": [ASK]})["choices"][0]["message"]["content"]
    assert reply_of(on, {"messages": [ASK], "echo": True, "logprobs": True})["choices"][0]["message"]["content"] \
        == alone
    status, _, out = call(on.port, "POST", "/v1/chat/completions", {"model": "qwen2", "messages": [ASK],
                                                                   "echo": "yes"})
    assert status == 400 and out["error"]["param"] == "echo"
