"""Ollama's API (/api/...): the official `ollama` client, answers checked against the engine run directly."""

import datetime
import http.client
import json
import os

import gguf
import numpy as np
import pytest

import pantheon
from tests.conftest import shared_path
from tests.pantheon.serve.http.server import CHAT_N_CTX, call

ollama = pytest.importorskip("ollama", reason="the ollama client is a test dependency (setup.cfg [test])")

GREEDY = {"temperature": 0, "num_predict": 6}
N_CTX = CHAT_N_CTX


@pytest.fixture(scope="module")
def client(qwen):
    return ollama.Client(host=qwen.url, timeout=60)



def chat_ids(prompts, messages):
    return prompts.encode_chat(prompts.render(messages))


def ndjson(port, path, body):
    """(status, content type, decoded lines) of one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), [json.loads(x) for x in resp.read().splitlines() if x]
    finally:
        conn.close()


def test_tags_ps_and_show_describe_the_file(client, qwen):
    path = shared_path("golden", "qwen2-q8_0.gguf")
    reader = gguf.GGUFReader(str(path))  # gguf-py's reader, not ours, counts the parameters
    parameters = sum(int(np.prod(t.shape)) for t in reader.tensors)
    [entry] = client.list().models
    assert entry.model == "qwen2:latest" and entry.size == os.path.getsize(path) and len(entry.digest) == 64
    assert (entry.details.format, entry.details.family, entry.details.quantization_level) == ("gguf", "qwen2", "Q8_0")
    assert entry.details.parameter_size == f"{parameters / 1e6:.2f}M"
    [running] = client.ps().models
    assert running.model == "qwen2:latest" and running.context_length == N_CTX
    # in host RAM (the in-process backend runs on the CPU), loaded until unloaded: `ollama ps` says "Forever"
    assert running.size_vram == 0 and running.expires_at.year - datetime.date.today().year > 200
    shown = client.show("qwen2:latest")
    assert shown.modelinfo["general.parameter_count"] == parameters
    assert shown.modelinfo["qwen2.context_length"] == N_CTX and "completion" in shown.capabilities
    assert "tools" in shown.capabilities and "<|im_start|>" in shown.template  # Qwen2.5's template has tools
    assert call(qwen.port, "GET", "/api/version")[2] == {"version": pantheon.__version__}


def test_chat_is_the_engines_greedy_reply_to_the_rendered_conversation(client, prompts, greedy, engine_model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    ids = chat_ids(prompts, messages)
    want = greedy(ids, 6)
    got = client.chat(model="qwen2", messages=messages, options=GREEDY, stream=False)
    assert got.message.role == "assistant" and got.message.content == engine_model.tokenizer.decode(want)
    assert got.done and got.done_reason == ("length" if len(want) == 6 else "stop")
    assert (got.prompt_eval_count, got.eval_count) == (len(ids), len(want))
    assert got.total_duration >= got.prompt_eval_duration + got.eval_duration - 1 and got.load_duration == 0


def test_a_streamed_chat_is_ndjson_pieces_then_the_final_object(qwen, client):
    body = {"model": "qwen2", "messages": [{"role": "user", "content": "Count to three."}], "options": GREEDY}
    status, kind, lines = ndjson(qwen.port, "/api/chat", body)
    assert status == 200 and kind == "application/x-ndjson"
    assert all(not x["done"] for x in lines[:-1]) and lines[-1]["done"] and lines[-1]["message"]["content"] == ""
    whole = client.chat(model="qwen2", messages=body["messages"], options=GREEDY, stream=False)
    assert "".join(x["message"]["content"] for x in lines) == whole.message.content
    assert lines[-1]["eval_count"] == whole.eval_count and lines[-1]["done_reason"] == whole.done_reason
    streamed = "".join(c.message.content for c in client.chat(model="qwen2", messages=body["messages"],
                                                               options=GREEDY, stream=True))
    assert streamed == whole.message.content


def test_generate_applies_the_template_and_system(client, prompts, greedy, engine_model):
    ids = chat_ids(prompts, [{"role": "system", "content": "Terse."}, {"role": "user", "content": "Why?"}])
    got = client.generate(model="qwen2", prompt="Why?", system="Terse.", options=GREEDY, stream=False)
    want = greedy(ids, 6)
    assert got.response == engine_model.tokenizer.decode(want) and got.prompt_eval_count == len(ids)
    assert list(got.context) == list(ids) + want


def test_raw_generate_and_its_context_carry_a_conversation_on(client, prompts, greedy, engine_model):
    tok = engine_model.tokenizer
    first = client.generate(model="qwen2", prompt="Once upon a time", raw=True, options=GREEDY, stream=False)
    ids = tok.encode("Once upon a time", add_special=True, parse_special=False)
    assert first.response == tok.decode(greedy(ids, 6)) and first.context is None  # raw: no context, as Ollama
    context = list(ids) + greedy(ids, 6)
    second = client.generate(model="qwen2", prompt="Then", context=context, options=GREEDY, stream=False)
    turn = chat_ids(prompts, [{"role": "user", "content": "Then"}])
    assert turn[0] == 1  # the template's prompt starts with BOS, which the context already holds
    want = greedy(context + turn[1:], 6)
    assert second.response == tok.decode(want) and list(second.context) == context + turn[1:] + want


def test_format_schema_constrains_the_reply(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    got = client.chat(model="qwen2", messages=[{"role": "user", "content": "n?"}], format=schema,
                      options={"temperature": 0, "num_predict": 40}, stream=False)
    value = json.loads(got.message.content)
    assert set(value) == {"n"} and isinstance(value["n"], int)
    flag = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
            "additionalProperties": False}
    raw = client.generate(model="qwen2", prompt="{", raw=True, format=flag, options={"temperature": 0,
                                                                                    "num_predict": 40}, stream=False)
    assert raw.done_reason == "stop" and isinstance(json.loads(raw.response)["ok"], bool)


def test_logprobs_name_the_chosen_token_first_under_greedy(client):
    got = client.generate(model="qwen2", prompt="Hello", raw=True, logprobs=True, top_logprobs=3,
                          options={"temperature": 0, "num_predict": 4}, stream=False)
    assert len(got.logprobs) == got.eval_count
    text = ""
    for entry in got.logprobs:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
        text += entry.token
    assert text == got.response


def test_tool_history_in_ollamas_shape_renders_as_the_openai_one(qwen, prompts):
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}}}}]
    ollama_messages = [{"role": "user", "content": "Weather in Paris?"},
                       {"role": "assistant", "content": "", "tool_calls": [
                           {"function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
                       {"role": "tool", "content": "sunny", "tool_name": "weather"}]
    openai_messages = [ollama_messages[0],
                       {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function",
                        "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                       {"role": "tool", "content": "sunny", "name": "weather"}]
    status, _, body = call(qwen.port, "POST", "/api/chat", {"model": "qwen2", "messages": ollama_messages,
                                                            "tools": tools, "stream": False, "options": GREEDY})
    assert status == 200, body
    want = prompts.encode_chat(prompts.render(openai_messages, tools))
    assert body["prompt_eval_count"] == len(want) and "sunny" in prompts.render(openai_messages, tools)


def test_an_empty_request_answers_load_and_names_the_model(qwen):
    status, _, body = call(qwen.port, "POST", "/api/chat", {"model": "qwen2:latest", "messages": []})
    assert status == 200 and body["done"] and body["done_reason"] == "load" and body["model"] == "qwen2:latest"
    status, _, body = call(qwen.port, "POST", "/api/generate", {"model": "qwen2"})
    assert status == 200 and body["done_reason"] == "load" and body["response"] == ""


@pytest.mark.parametrize("path, body, field", [
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": {"num_predict": "x"}},
     "options.num_predict"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": {"bogus": 1}}, "options.bogus"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": {"mirostat": 7}}, "options.mirostat"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
    ("/api/chat", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "think": "max"}, "think"),
    ("/api/chat", {"messages": [], "keep_alive": 0}, "keep_alive"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "keep_alive": "soon"}, "keep_alive"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "format": "yaml"}, "format"),
    ("/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, "template"),
    ("/api/generate", {"prompt": "x", "context": [1, 10**9]}, "context"),
    ("/api/generate", {"prompt": "x", "width": 64}, "width"),
    ("/api/embed", {"input": 7}, "input"),
])
def test_bad_fields_are_ollama_shaped_400s_naming_the_field(qwen, path, body, field):
    body = dict(body, model="qwen2", **({} if path == "/api/embed" else {"stream": False}))
    status, _, answer = call(qwen.port, "POST", path, body)
    assert status == 400 and set(answer) == {"error"} and answer["error"].startswith(field + ":"), answer


def test_runner_options_are_accepted_and_unknown_models_are_404(served, client):
    got = client.chat(model="qwen2", messages=[{"role": "user", "content": "x"}], stream=False,
                      options=dict(GREEDY, num_ctx=8192, num_thread=2, num_gpu=99, use_mmap=True))
    assert got.done
    status, _, body = call(served.port, "POST", "/api/chat", {"model": "nope", "messages": [{"role": "user",
                                                                                            "content": "x"}]})
    assert status == 404 and "nope" in body["error"]
    status, _, body = call(served.port, "POST", "/v1/chat/completions", {"model": "nope", "messages": []})
    assert status in (400, 404) and isinstance(body["error"], dict)  # the OpenAI routes keep OpenAI's shape


def test_embed_is_unit_vectors_cut_to_the_context_unless_told_not_to(qwen, client, engine_model):
    tok = engine_model.tokenizer
    hidden = lambda ids: engine_model.forward([(engine_model.new_cache(N_CTX), ids)], hidden=[0])[0]  # noqa: E731
    got = client.embed(model="qwen2", input=["red", "green apples"])
    for vector, text in zip(got.embeddings, ["red", "green apples"]):
        want = hidden(tok.encode(text, add_special=True, parse_special=True))[-1]  # [dim]
        np.testing.assert_allclose(vector, want / np.linalg.norm(want), atol=2e-5)
    long_text = " apple" * 1200
    ids = tok.encode(long_text, add_special=True, parse_special=True)
    assert len(ids) > N_CTX
    cut = client.embed(model="qwen2", input=long_text, dimensions=8).embeddings[0]
    want = hidden(ids[:N_CTX - 1])[-1][:8]  # [8]
    np.testing.assert_allclose(cut, want / np.linalg.norm(want), atol=2e-5)
    status, _, body = call(qwen.port, "POST", "/api/embed", {"model": "qwen2", "input": long_text, "truncate": False})
    assert status == 400 and "context" in body["error"]
    raw = client.embeddings(model="qwen2", prompt="red").embedding
    np.testing.assert_allclose(raw, hidden(tok.encode("red", add_special=True, parse_special=True))[-1], atol=2e-4)
