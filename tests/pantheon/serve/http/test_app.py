"""The OpenAI API over a real waitress server, driven by the official openai client."""

import openai
import pytest

from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.text.prompting import PromptBuilder
from pantheon.engine.sampler import SamplingParams
from tests.pantheon.serve.http.server import call

NO_EOS = {"2": -100}  # both golden vocabularies end generation with id 2; banned, length decides


def greedy_text(model, ids, n):
    """Text of `n` greedy tokens straight from the engine, EOS banned as in the requests."""
    engine = Engine(model, EngineConfig(n_ctx=256))
    params = SamplingParams(temperature=0.0, logit_bias={2: -100.0})
    engine.add(Request(1, tuple(ids), n, params, frozenset(model.tokenizer.stop_ids)))
    tokens = []
    while engine.has_work:
        tokens += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return model.tokenizer.decode(tokens)


def test_models_list_carries_capabilities(client):
    models = {m.id: m for m in client.models.list()}
    assert set(models) == {"qwen2", "llama"}
    meta = models["qwen2"].model_extra["meta"]
    assert meta["context_length"] == 256 and meta["replicas"] == 1 and meta["state"] == "loaded"
    assert models["qwen2"].object == "model" and models["qwen2"].owned_by == "pantheon"
    assert models["qwen2"].model_extra["max_model_len"] == 256  # vLLM's name for the context a request fits


def test_a_model_is_retrieved_by_id_and_an_unknown_id_is_404(client, served):
    one = client.models.retrieve("qwen2")
    assert one.id == "qwen2" and one.model_extra["meta"] == {m.id: m for m in client.models.list()}["qwen2"].model_extra[
        "meta"]
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("org/no-such-model")  # a slash stays in the id, as in HuggingFace names
    assert err.value.body["code"] == "model_not_found" and "org/no-such-model" in err.value.body["message"]
    status, _, body = call(served.port, "GET", "/models/llama")
    assert status == 200 and body["id"] == "llama"


def test_completion_matches_the_engine(client, reference):
    out = client.completions.create(model="qwen2", prompt="The capital of France is", max_tokens=10,
                                    temperature=0, logit_bias=NO_EOS)
    ids = reference["qwen2"].tokenizer.encode("The capital of France is", add_special=True)
    assert out.choices[0].text == greedy_text(reference["qwen2"], ids, 10)
    assert out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 10
    assert out.usage.total_tokens == len(ids) + 10
    assert out.id.startswith("cmpl-") and out.model == "qwen2" and out.system_fingerprint


def test_chat_matches_the_engine_streaming_or_not(client, reference):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    model = reference["llama"]
    ids = PromptBuilder(model.tokenizer, model.gguf.metadata).chat(messages)
    want = greedy_text(model, ids, 9)
    out = client.chat.completions.create(model="llama", messages=messages, max_tokens=9, temperature=0,
                                         logit_bias=NO_EOS)
    assert out.choices[0].message.role == "assistant" and out.choices[0].message.content == want
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-")
    assert out.usage.prompt_tokens == len(ids) and out.usage.prompt_tokens_details.cached_tokens == 0
    chunks = list(client.chat.completions.create(model="llama", messages=messages, max_tokens=9, temperature=0,
                                                 logit_bias=NO_EOS, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_stream_in_text_completion_shape(client):
    chunks = list(client.completions.create(model="qwen2", prompt=[1, 500, 600], max_tokens=5, temperature=0,
                                            logit_bias=NO_EOS, stream=True))
    assert all(c.object == "text_completion" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    whole = client.completions.create(model="qwen2", prompt=[1, 500, 600], max_tokens=5, temperature=0,
                                      logit_bias=NO_EOS)
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert whole.usage.prompt_tokens == 3


def test_content_parts_render_like_a_string(client):
    parts = [{"type": "text", "text": "Name "}, {"type": "text", "text": "a colour."}]
    a = client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": parts}],
                                       max_tokens=4, temperature=0, logit_bias=NO_EOS)
    b = client.chat.completions.create(model="qwen2", messages=[{"role": "user", "content": "Name a colour."}],
                                       max_tokens=4, temperature=0, logit_bias=NO_EOS)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens


def test_same_seed_same_text(client):
    kw = dict(model="qwen2", prompt="Once upon a time", max_tokens=8, temperature=1.0, logit_bias=NO_EOS,
              extra_body={"top_k": 0, "min_p": 0.0})
    a = client.completions.create(seed=7, **kw).choices[0].text
    assert client.completions.create(seed=7, **kw).choices[0].text == a
    assert client.completions.create(seed=8, **kw).choices[0].text != a


def test_max_tokens_is_clamped_to_the_room_left(client, served):
    out = client.completions.create(model="qwen2", prompt=list(range(1, 251)), max_tokens=100, temperature=0,
                                    logit_bias=NO_EOS)
    assert out.usage.completion_tokens == 256 - 250 and out.choices[0].finish_reason == "length"


def test_second_turn_of_a_session_reuses_the_cache(client):
    first = [{"role": "user", "content": "Tell me a story about a dragon."}]
    headers = {"X-Session-Id": "story-1"}
    a = client.chat.completions.create(model="qwen2", messages=first, max_tokens=6, temperature=0,
                                       logit_bias=NO_EOS, extra_headers=headers)
    assert a.usage.prompt_tokens_details.cached_tokens == 0
    second = first + [{"role": "assistant", "content": a.choices[0].message.content},
                      {"role": "user", "content": "And then?"}]
    b = client.chat.completions.create(model="qwen2", messages=second, max_tokens=4, temperature=0,
                                       logit_bias=NO_EOS, extra_headers=headers, user="ignored-header-wins")
    assert b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1
    c = client.chat.completions.create(model="qwen2", messages=second, max_tokens=4, temperature=0,
                                       logit_bias=NO_EOS, user="another-session")
    # another session starts from a copy of what story-1 kept (the automatic prefix cache), to the same reply
    assert c.usage.prompt_tokens_details.cached_tokens == b.usage.prompt_tokens - 1
    assert c.choices[0].message.content == b.choices[0].message.content


def test_tokenize_and_detokenize_round_trip(served, reference):
    tok = reference["llama"].tokenizer
    status, _, body = call(served.port, "POST", "/tokenize", {"model": "llama", "content": "Hello world"})
    assert status == 200 and body["tokens"] == tok.encode("Hello world", add_special=False)
    status, _, pieces = call(served.port, "POST", "/tokenize",
                             {"model": "llama", "content": "Hello world", "add_special": True, "with_pieces": True})
    assert [p["id"] for p in pieces["tokens"]] == tok.encode("Hello world", add_special=True)
    assert "".join(p["piece"] for p in pieces["tokens"][1:]) == " Hello world"
    status, _, text = call(served.port, "POST", "/detokenize", {"model": "llama", "tokens": body["tokens"]})
    assert status == 200 and text["content"] == tok.decode(body["tokens"])


def test_health_and_metrics_are_public_and_truthful(served, client):
    client.completions.create(model="llama", prompt="Hi", max_tokens=2, temperature=0)
    status, _, health = call(served.port, "GET", "/health")
    assert status == 200 and health["status"] == "ok"
    assert {m["state"] for m in health["models"].values()} == {"loaded"}
    status, headers, text = call(served.port, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'pantheon_requests_total{model="llama",endpoint="completions",status="200"}' in text
    assert 'pantheon_time_to_first_token_seconds_count{model="llama"}' in text
