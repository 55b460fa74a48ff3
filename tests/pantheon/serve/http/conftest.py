"""Fixtures for the HTTP tests: one two-model server per module, closed at the end."""

import numpy as np
import openai
import pytest

import pantheon
from tests.conftest import shared_path
from tests.pantheon.serve.http.rerank_kit import ROWS, SCALE, TEMPLATE
from tests.pantheon.serve.http.server import CHAT_N_CTX, Served, greedy_ids, open_models, qwen_served
from tests.rerankers import make_reranker, output_matrix


@pytest.fixture(scope="session", autouse=True)
def _kernels_compiled(compiled_kernels):
    """Kernel compiles happen once per session, never under a request's timeout."""


@pytest.fixture(scope="module")
def served():
    server = Served(open_models())
    yield server
    server.close()


@pytest.fixture(scope="module")
def qwen(request):
    """qwen2 under Qwen2.5's template, with the module's N_CTX (256 where it sets none)."""
    server = qwen_served(getattr(request.module, "N_CTX", 256))
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(served):
    """The official openai client on the module's server; no retries, so a failure shows as one."""
    return openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference():
    """Separate Model objects: the reference engine never shares one with the server's threads."""
    return open_models()


@pytest.fixture(scope="module")
def engine_model():
    """The golden qwen2 model opened apart from any server, for reference replies."""
    return pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)


@pytest.fixture(scope="module")
def greedy(engine_model):
    """ids, n -> the n greedy token ids (fewer at EOS) from the engine, outside any server."""
    return lambda ids, n: greedy_ids(engine_model, ids, n, CHAT_N_CTX)


@pytest.fixture(scope="module")
def prompts(qwen):
    """The chat prompts of the module's qwen2 server (its template, as the server renders it)."""
    return qwen.backend.served("qwen2").prompts


@pytest.fixture(scope="module")
def rerank_files(tmp_path_factory):
    """Rerankers made from the golden qwen3 (with a template) and llama, their head rows, and llama itself."""
    d = tmp_path_factory.mktemp("rerankers")
    qwen3, llama = shared_path("golden", "qwen3-q8_0.gguf"), shared_path("golden", "llama-q8_0.gguf")
    return {"rq": (make_reranker(qwen3, d / "rq.gguf", ROWS, TEMPLATE, scale=SCALE),
                   output_matrix(qwen3)[ROWS] * SCALE),
            "rl": (make_reranker(llama, d / "rl.gguf", ROWS, scale=SCALE), output_matrix(llama)[ROWS] * SCALE),
            "llama": (llama, None)}


@pytest.fixture(scope="module")
def rerankers(rerank_files):
    """A server of the rerankers and llama (an embedding model beside them)."""
    server = Served({name: pantheon.open_model(str(path), threads=1) for name, (path, _) in rerank_files.items()})
    yield server
    server.close()


@pytest.fixture(scope="module")
def rerank_reference(rerank_files):
    """(model, ids) -> the reference relevance: hidden states of a model the server never touches, the head's
    rows from gguf-py; qwen3 reads the last row and takes a softmax, llama the first and no softmax."""
    models = {name: pantheon.open_model(str(rerank_files[name][0]), threads=1) for name in ("rq", "rl")}

    def relevance(name, ids):
        model, head = models[name], rerank_files[name][1].astype(np.float64)  # head [2, dim]
        h = model.forward([(model.new_cache(256), ids)], hidden=[0])[0].astype(np.float64)  # [len(ids), dim]
        if name == "rl":
            return float(head[0] @ h[0])
        logits = head @ h[-1]  # [2]
        return float(1.0 / (1.0 + np.exp(logits[1] - logits[0])))
    return relevance
