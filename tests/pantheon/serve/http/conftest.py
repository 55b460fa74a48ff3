"""Fixtures for the HTTP tests: one two-model server per module, closed at the end."""

import openai
import pytest

import pantheon
from tests.conftest import shared_path
from tests.pantheon.serve.http.server import CHAT_N_CTX, Served, greedy_ids, open_models, qwen_served


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
