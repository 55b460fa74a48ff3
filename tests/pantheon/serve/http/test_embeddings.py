"""/v1/embeddings and /embedding: the official openai client, llama-server's shapes, and every refusal."""

import base64
import dataclasses

import numpy as np
import openai
import pytest

from pantheon.serve.http.embeddings import normalized
from tests.pantheon.serve.http.server import call


@pytest.fixture(scope="module")
def hidden(reference):
    """ids -> float32 [len(ids), dim]: the final normed hidden states, from a model the server never touches."""
    model = reference["qwen2"]
    return lambda ids: model.forward([(model.new_cache(256), ids)], hidden=[0])[0]


@pytest.fixture(scope="module")
def tok(served):
    return served.backend.served("qwen2").tokenizer


def unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def test_the_openai_client_gets_unit_last_token_vectors(client, tok, hidden):
    """The client asks for base64 unless told otherwise; it decodes what we send."""
    texts = ["The quick brown fox", "jumps over the lazy dog"]
    got = client.embeddings.create(model="qwen2", input=texts)
    ids = [tok.encode(t, add_special=True, parse_special=True) for t in texts]
    assert [d.index for d in got.data] == [0, 1] and got.model == "qwen2"
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(map(len, ids))
    for d, i in zip(got.data, ids):
        np.testing.assert_allclose(d.embedding, unit(hidden(i)[-1]), atol=2e-5)


def test_float_format_token_inputs_and_dimensions(served, hidden):
    ids = [[10, 20, 30, 40], [7, 8, 9]]
    status, _, body = call(served.port, "POST", "/v1/embeddings",
                           {"model": "qwen2", "input": ids, "encoding_format": "float", "dimensions": 16})
    assert status == 200, body
    assert body["object"] == "list" and body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    for d, i in zip(body["data"], ids):
        assert d["object"] == "embedding" and len(d["embedding"]) == 16
        np.testing.assert_allclose(d["embedding"], unit(hidden(i)[-1][:16]), atol=2e-5)
    status, _, one = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": ids[0]})
    assert status == 200 and len(one["data"]) == 1
    np.testing.assert_allclose(one["data"][0]["embedding"], unit(hidden(ids[0])[-1]), atol=2e-5)


def test_base64_is_little_endian_float32(served, hidden):
    status, _, body = call(served.port, "POST", "/v1/embeddings",
                           {"model": "qwen2", "input": [5, 6, 7], "encoding_format": "base64"})
    assert status == 200, body
    v = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(v, unit(hidden([5, 6, 7])[-1]), atol=2e-5)


def test_more_inputs_than_the_model_runs_at_once_come_back_in_order(served, hidden):
    inputs = [[3 + i, 40 + i, 90 + 2 * i] for i in range(11)]  # 4 run together; the rest follow
    status, _, body = call(served.port, "POST", "/v1/embeddings",
                           {"model": "qwen2", "input": inputs, "encoding_format": "float"})
    assert status == 200, body
    for i, (d, ids) in enumerate(zip(body["data"], inputs)):
        assert d["index"] == i
        np.testing.assert_allclose(d["embedding"], unit(hidden(ids)[-1]), atol=2e-5)


@pytest.mark.parametrize("how", [-1, 0, 1, 2, 3])
def test_native_embedding_and_llama_servers_norms(served, tok, hidden, how):
    status, _, body = call(served.port, "POST", "/embedding",
                           {"model": "qwen2", "content": ["hello there"], "embd_normalize": how})
    assert status == 200, body
    raw = hidden(tok.encode("hello there", add_special=True, parse_special=True))[-1].astype(np.float64)
    want = {-1: raw, 0: raw * 32760 / np.abs(raw).max(), 1: raw / np.abs(raw).sum(), 2: unit(raw),
            3: raw / (np.abs(raw) ** 3).sum() ** (1 / 3)}[how]
    assert [d["index"] for d in body] == [0] and len(body[0]["embedding"]) == 1
    np.testing.assert_allclose(body[0]["embedding"][0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_native_route_takes_input_too_and_the_plural_path(served, hidden):
    status, _, body = call(served.port, "POST", "/embeddings", {"model": "qwen2", "input": [11, 12]})
    assert status == 200, body
    np.testing.assert_allclose(body[0]["embedding"][0], unit(hidden([11, 12])[-1]), atol=2e-5)


def test_a_mean_pooling_model_pools_every_position(served, hidden, monkeypatch):
    runner = served.backend._runner("qwen2")
    monkeypatch.setattr(runner, "served", dataclasses.replace(runner.served, pooling="mean"))
    status, _, body = call(served.port, "POST", "/v1/embeddings",
                           {"model": "qwen2", "input": [21, 22, 23, 24, 25], "encoding_format": "float"})
    assert status == 200, body
    np.testing.assert_allclose(body["data"][0]["embedding"], unit(hidden([21, 22, 23, 24, 25]).mean(0)), atol=2e-5)


@pytest.mark.parametrize("pooling, says", [("none", "pooling type 'none'"), ("rank", "reranker")])
def test_models_that_do_not_pool_are_refused_by_name(served, monkeypatch, pooling, says):
    runner = served.backend._runner("qwen2")
    monkeypatch.setattr(runner, "served", dataclasses.replace(runner.served, pooling=pooling))
    status, _, body = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": "hi"})
    assert status == 400 and says in body["error"]["message"] and body["error"]["param"] == "model"


def test_a_model_of_pooling_none_gives_every_tokens_raw_vector_at_embedding(served, hidden, monkeypatch):
    """llama-server's per-token embeddings: one unnormalized row per token, on /embedding only."""
    runner = served.backend._runner("qwen2")
    monkeypatch.setattr(runner, "served", dataclasses.replace(runner.served, pooling="none"))
    inputs = [[21, 22, 23, 24, 25], list(range(30, 100))]  # the second runs in two prefill chunks
    status, _, body = call(served.port, "POST", "/embedding",
                           {"model": "qwen2", "content": inputs, "embd_normalize": 2})
    assert status == 200, body
    for entry, ids in zip(body, inputs):
        assert len(entry["embedding"]) == len(ids)
        np.testing.assert_allclose(entry["embedding"], hidden(ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fields, param", [
    ({}, "input"), ({"input": ""}, "input"), ({"input": []}, "input"), ({"input": ["a", ""]}, "input"),
    ({"input": [[]]}, "input"), ({"input": [1.5]}, "input"), ({"input": [True]}, "input"),
    ({"input": [[1, 2], "x", 3]}, "input"), ({"input": [["a"]]}, "input"), ({"input": {"text": "a"}}, "input"),
    ({"input": [1, 99999999]}, "input[0]"), ({"input": [[1], [-1]]}, "input[1]"),
    ({"input": "a", "encoding_format": "float16"}, "encoding_format"),
    ({"input": "a", "dimensions": 0}, "dimensions"), ({"input": "a", "dimensions": 10**6}, "dimensions"),
    ({"input": "a", "dimensions": "8"}, "dimensions"), ({"input": "a", "embd_normalize": "2"}, "embd_normalize"),
    ({"input": "a", "temperature": 0.5}, "temperature"),
])
def test_bad_bodies_are_400s_naming_the_field(served, fields, param):
    status, _, body = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", **fields})
    assert status == 400, body
    assert body["error"]["param"] == param


def test_too_many_inputs_and_too_long_inputs_are_refused(served):
    status, _, body = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": ["a"] * 2049})
    assert status == 400 and "2048" in body["error"]["message"]
    status, _, body = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": [[1] * 256]})
    assert status == 400 and body["error"]["code"] == "context_over_budget", body
    status, _, body = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": [[1] * 255]})
    assert status == 200, body


def test_the_native_route_needs_content_or_input(served):
    status, _, body = call(served.port, "POST", "/embedding", {"model": "qwen2"})
    assert status == 400 and body["error"]["param"] == "content"


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="hi")


def test_norm_of_a_zero_vector_is_zero_not_nan():
    for how in (0, 1, 2, 5):
        assert not normalized(np.zeros(4), how).any()


def test_embeddings_are_counted_in_the_metrics(served):
    def figures():
        text = call(served.port, "GET", "/metrics")[2]
        lines = [ln for ln in text.splitlines() if 'model="qwen2"' in ln and not ln.startswith("#")]
        asked = sum(float(ln.split()[-1]) for ln in lines if ln.startswith("pantheon_requests_total")
                    and 'endpoint="embeddings"' in ln and 'status="200"' in ln)
        prompt = sum(float(ln.split()[-1]) for ln in lines if ln.startswith("pantheon_prompt_tokens_total"))
        return asked, prompt

    before = figures()
    status, _, body = call(served.port, "POST", "/v1/embeddings", {"model": "qwen2", "input": [[1, 2, 3], [4, 5]]})
    assert status == 200, body
    after = figures()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 5)
