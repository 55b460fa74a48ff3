"""Acceptance: the official openai client (sync, async, streaming) against a real pantheon-serve:
a tool-calling loop on a model given a tool-capable template, and json_schema answers that validate;
the official ollama and anthropic clients on the same server."""

import asyncio
import json

import jsonschema
import numpy as np
import openai
import pytest

import pantheon

from tests.conftest import shared_path
from tests.rerankers import make_reranker, output_matrix
from tests.workers.serving import Server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 6}}, "required": ["zone"],
    "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 10},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
                                           "sure": {"type": "boolean"}},
          "required": ["answer", "confidence", "sure"], "additionalProperties": False}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
RERANK_ROWS, RERANK_TEMPLATE = [2048, 1000], "Query: {query}\nDocument: {document}\nRelevant:"


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    """A qwen3 reranker (a golden model with a cls.output of two of its output rows) and its head."""
    src = shared_path("golden", "qwen3-q8_0.gguf")
    head = output_matrix(src)[RERANK_ROWS] / 16  # [2, dim]: logits a few apart, not saturated
    path = make_reranker(src, tmp_path_factory.mktemp("rr") / "rr.gguf", RERANK_ROWS, RERANK_TEMPLATE, scale=1 / 16)
    return str(path), head.astype(np.float64)


@pytest.fixture(scope="module")
def server(reranker):
    qwen = str(shared_path("golden", "qwen2-q8_0.gguf"))
    template = str(shared_path("templates", "Qwen-Qwen2.5-7B-Instruct.jinja"))
    srv = Server(["--model", qwen, "--name", "qwen2", "--chat-template-file", template, "--ctx-cap", "1024",
                  "--model", "pantheon/demo/pantheon-demo.gguf", "--name", "demo",
                  "--model", reranker[0], "--name", "rr", "--http-workers", "1"])
    yield srv
    srv.stop()


def tool_result(call):
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, PARAMS[call.function.name])
    return {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"ok": True, "echo": args})}


def assistant_turn(message):
    return {"role": "assistant", "content": message.content,
            "tool_calls": [{"id": c.id, "type": "function",
                            "function": {"name": c.function.name, "arguments": c.function.arguments}}
                           for c in message.tool_calls]}


def test_sync_tool_loop(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    messages = list(USER)
    for seed in (1, 2):
        out = client.chat.completions.create(model="qwen2", messages=messages, tools=TOOLS, tool_choice="required",
                                             max_tokens=80, temperature=1.0, seed=seed)
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        messages += [assistant_turn(choice.message)] + [tool_result(c) for c in choice.message.tool_calls]
    final = client.chat.completions.create(model="qwen2", messages=messages, tools=TOOLS, tool_choice="none",
                                           max_tokens=8)
    assert final.choices[0].message.tool_calls is None and final.usage.prompt_tokens > 100


def test_async_tool_loop_with_a_named_function(server):
    async def loop():
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
        choice = {"type": "function", "function": {"name": "get_time"}}
        out = await client.chat.completions.create(model="qwen2", messages=USER, tools=TOOLS, tool_choice=choice,
                                                   max_tokens=60, temperature=1.0, seed=7)
        message = out.choices[0].message
        assert [c.function.name for c in message.tool_calls] == ["get_time"]
        messages = USER + [assistant_turn(message), tool_result(message.tool_calls[0])]
        again = await client.chat.completions.create(model="qwen2", messages=messages, tools=TOOLS, max_tokens=4)
        await client.close()
        return again

    assert asyncio.run(loop()).choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_streamed_tool_call_assembles_to_valid_arguments(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    stream = client.chat.completions.create(model="qwen2", messages=USER, tools=TOOLS, tool_choice="required",
                                            max_tokens=80, temperature=1.0, seed=11, stream=True)
    calls, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        finish = chunk.choices[0].finish_reason or finish
        for c in chunk.choices[0].delta.tool_calls or ():
            entry = calls.setdefault(c.index, {"id": c.id, "name": "", "arguments": ""})
            entry["name"] += c.function.name or ""
            entry["arguments"] += c.function.arguments or ""
    assert finish == "tool_calls" and calls
    for entry in calls.values():
        jsonschema.validate(json.loads(entry["arguments"]), PARAMS[entry["name"]])


@pytest.mark.parametrize("model", ["qwen2", "demo"])
def test_every_json_schema_answer_validates(server, model):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}
    for seed in range(4):
        out = client.chat.completions.create(model=model, messages=USER, response_format=fmt, max_tokens=120,
                                             temperature=1.0, seed=seed)
        assert out.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(out.choices[0].message.content), SCHEMA)
    text = ""
    for chunk in client.chat.completions.create(model=model, messages=USER, response_format=fmt, max_tokens=120,
                                                temperature=1.0, seed=9, stream=True):
        text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
    jsonschema.validate(json.loads(text), SCHEMA)


def test_embeddings_come_through_the_rings(server):
    """A die worker pools the vector (float32 over the ring), the front normalizes and encodes it."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    texts = ["Paris is the capital of France", "rings carry floats now"]
    got = client.embeddings.create(model="qwen2", input=texts)
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    for d, text in zip(got.data, texts):
        ids = model.tokenizer.encode(text, add_special=True, parse_special=True)
        last = model.forward([(model.new_cache(64), ids)], hidden=[0])[0][-1].astype(np.float64)  # [dim]
        np.testing.assert_allclose(d.embedding, last / np.linalg.norm(last), atol=2e-5)


def test_rerank_scores_come_through_the_rings(server, reranker):
    """The die runs the reranker's head (a softmax over two rows at the last token for qwen3); the front
    fills its rerank template, sorts and cuts."""
    docs = ["pandas eat bamboo", "Paris is in France", "a bear of China"]
    status, body, _ = server.request("POST", "/v1/rerank", {"model": "rr", "query": "a panda", "documents": docs,
                                                           "top_n": 2}, timeout=300)
    assert status == 200, body
    model = pantheon.open_model(reranker[0], threads=1)
    want = []
    for d in docs:
        text = RERANK_TEMPLATE.replace("{query}", "a panda").replace("{document}", d)
        ids = model.tokenizer.encode(text, add_special=False, parse_special=True)
        logits = reranker[1] @ model.forward([(model.new_cache(64), ids)], hidden=[0])[0][-1]  # [2]
        want.append(1.0 / (1.0 + np.exp(logits[1] - logits[0])))
    results = json.loads(body)["results"]
    assert [r["index"] for r in results] == sorted(range(3), key=lambda i: -want[i])[:2]
    assert all(abs(r["relevance_score"] - want[r["index"]]) < 1e-3 for r in results)


def test_per_token_timings_through_the_rings_know_the_prompt_from_the_first_token(server):
    """llama.cpp's web UI asks timings_per_token: the die's first TOKENS frame brings the cache count."""
    body = {"model": "qwen2", "prompt": "Once upon a time " * 12, "max_tokens": 4, "temperature": 0,
            "logit_bias": {"2": -100}, "stream": True, "timings_per_token": True}
    for _ in range(2):  # the second time its leading blocks of 16 tokens are in the prefix cache
        status, raw, _ = server.request("POST", "/v1/completions", body, timeout=300)
        chunks = [json.loads(b[6:]) for b in raw.decode().split("\n\n") if b.startswith("data: {")]
        assert status == 200 and len(chunks) >= 2
        counts = {(c["timings"]["prompt_n"], c["timings"]["cache_n"]) for c in chunks}
        assert len(counts) == 1
    prompt_n, cache_n = counts.pop()
    assert cache_n > 0 and prompt_n >= 1


def test_the_ollama_client_through_the_rings(server):
    """Ollama's routes on the ring backend: the slot's file described, a greedy chat streamed and whole the
    same as the OpenAI route's, an embedding as the engine pools it."""
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=server.url, timeout=300)
    listed = {m.model: m for m in client.list().models}
    assert set(listed) == {"qwen2:latest", "demo:latest", "rr:latest"}
    qwen = listed["qwen2:latest"].details
    assert (qwen.family, qwen.quantization_level, qwen.format) == ("qwen2", "Q8_0", "gguf")
    assert {m.model: m.size_vram for m in client.ps().models} == dict.fromkeys(listed, 0)  # CPU dies only
    messages = [{"role": "user", "content": "Say something."}]
    whole = client.chat(model="qwen2", messages=messages, options={"temperature": 0, "num_predict": 8}, stream=False)
    streamed = list(client.chat(model="qwen2:latest", messages=messages, options={"temperature": 0, "num_predict": 8},
                                stream=True))
    assert "".join(c.message.content for c in streamed) == whole.message.content and streamed[-1].done
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    same = oai.chat.completions.create(model="qwen2", messages=messages, temperature=0, max_tokens=8)
    assert same.choices[0].message.content == whole.message.content
    assert same.usage.prompt_tokens == whole.prompt_eval_count and same.usage.completion_tokens == whole.eval_count
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    ids = model.tokenizer.encode("rings", add_special=True, parse_special=True)
    last = model.forward([(model.new_cache(64), ids)], hidden=[0])[0][-1].astype(np.float64)  # [dim]
    np.testing.assert_allclose(client.embed(model="qwen2", input="rings").embeddings[0], last / np.linalg.norm(last),
                               atol=2e-5)


def test_the_anthropic_client_through_the_rings(server):
    """Anthropic's Messages route on the ring backend: a greedy reply whole and streamed the same as the OpenAI
    route's, a forced tool call as a tool_use block, the prompt counted as the OpenAI route counts it."""
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "Say something."}]
    whole = client.messages.create(model="qwen2", max_tokens=8, messages=messages, extra_body={"temperature": 0})
    with client.messages.stream(model="qwen2", max_tokens=8, messages=messages, extra_body={"temperature": 0}) as s:
        streamed = s.get_final_message()
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    same = oai.chat.completions.create(model="qwen2", messages=messages, temperature=0, max_tokens=8)
    assert whole.content[0].text == streamed.content[0].text == same.choices[0].message.content
    assert whole.usage.output_tokens == same.usage.completion_tokens
    assert client.messages.count_tokens(model="qwen2", messages=messages).input_tokens == same.usage.prompt_tokens
    tool = {"name": WEATHER["function"]["name"], "input_schema": WEATHER["function"]["parameters"]}
    called = client.messages.create(model="qwen2", max_tokens=120, messages=[{"role": "user", "content": "Oslo?"}],
                                    tools=[tool], tool_choice={"type": "tool", "name": "get_weather"})
    assert called.stop_reason == "tool_use" and called.content[-1].name == "get_weather"
    jsonschema.validate(called.content[-1].input, tool["input_schema"])


def test_the_responses_api_through_the_rings(server):
    """OpenAI's Responses route on the ring backend: a greedy reply whole and streamed the same as the chat
    route's, the input counted as the chat route counts it, a forced function call as a function_call item."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
    body = dict(model="qwen2", input="Say something.", max_output_tokens=8, temperature=0)
    whole = client.responses.create(**body)
    streamed = [e for e in client.responses.create(**body, stream=True)]
    same = client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "Say something."}],
                                          temperature=0, max_tokens=8)
    text = "".join(e.delta for e in streamed if e.type == "response.output_text.delta")
    assert whole.output_text == text == same.choices[0].message.content
    assert streamed[-1].response.usage.output_tokens == whole.usage.output_tokens == same.usage.completion_tokens
    assert client.responses.input_tokens.count(model="qwen2", input="Say something.").input_tokens == \
        same.usage.prompt_tokens
    tool = dict(WEATHER["function"], type="function")
    called = client.responses.create(model="qwen2", input="Oslo?", max_output_tokens=120, tools=[tool],
                                     tool_choice={"type": "function", "name": "get_weather"})
    assert called.output[-1].type == "function_call" and called.output[-1].name == "get_weather"
    jsonschema.validate(json.loads(called.output[-1].arguments), tool["parameters"])
