"""Fixtures for the HTTP tests: one two-model server per module, closed at the end."""

import openai
import pytest

from tests.pantheon.serve.http.server import Served, open_models, qwen_served


@pytest.fixture(scope="session", autouse=True)
def _kernels_compiled(compiled_kernels):
    """Kernel compiles happen once per session, never under a request's timeout."""


@pytest.fixture(scope="module")
def served():
    server = Served(open_models())
    yield server
    server.close()


@pytest.fixture(scope="module")
def qwen():
    server = qwen_served()
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
