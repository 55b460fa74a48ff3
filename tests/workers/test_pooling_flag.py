"""--pooling through a real pantheon-serve: a slot's pooling overrides its GGUF's on the die and in the
fronts (none: per-token vectors at /embedding; rank without a classification head: a failed load)."""

import json

import numpy as np
import pytest

import pantheon
from tests.conftest import shared_path
from tests.workers.serving import Server
from workers import protocol


@pytest.fixture(scope="module")
def server():
    qwen = str(shared_path("golden", "qwen2-q8_0.gguf"))
    srv = Server(["--model", qwen, "--name", "tokens", "--pooling", "none",
                  "--model", qwen, "--name", "headless", "--pooling", "rank", "--http-workers", "1"])
    yield srv
    srv.stop()


def post(server, path, body):
    status, raw, _ = server.request("POST", path, body, timeout=300)
    return status, json.loads(raw)


def test_pooling_none_gives_each_tokens_hidden_state_through_the_rings(server):
    ids = [[5, 6, 7, 8], [40, 41]]
    status, body = post(server, "/embedding", {"model": "tokens", "content": ids})
    assert status == 200, body
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    for entry, want_ids in zip(body, ids):
        want = model.forward([(model.new_cache(64), want_ids)], hidden=[0])[0]  # [len(ids), dim]
        np.testing.assert_allclose(entry["embedding"], want, rtol=1e-4, atol=1e-4)
    status, body = post(server, "/v1/embeddings", {"model": "tokens", "input": "hi"})
    assert status == 400 and "/embedding" in body["error"]["message"], body


def test_per_token_vectors_of_more_than_one_message_arrive_whole(server):
    """1,500 positions x 256 dims cross the rings as two EMBEDDING pieces; the client gets every row once."""
    ids = [5 + i % 300 for i in range(1500)]
    status, body = post(server, "/embedding", {"model": "tokens", "content": [ids]})
    assert status == 200, body
    model = pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)
    want = model.forward([(model.new_cache(2048), ids)], hidden=[0])[0]  # [1500, 256]
    assert want.size > protocol.EMBEDDING_PIECE
    np.testing.assert_allclose(body[0]["embedding"], want, rtol=1e-4, atol=1e-4)


def test_pooling_rank_on_a_model_without_a_head_fails_its_load_and_says_why(server):
    status, raw = server.get("/health")
    health = json.loads(raw)["models"]
    assert health["tokens"]["state"] == "loaded"
    assert health["headless"]["state"] == "failed" and "classification head" in health["headless"]["reason"]
