"""Fixtures for the HTTP tests: one two-model server per module, closed at the end."""

import pytest

from tests.pantheon.serve.http.server import Served, open_models


@pytest.fixture(scope="session", autouse=True)
def _kernels_compiled(compiled_kernels):
    """Kernel compiles happen once per session, never under a request's timeout."""


@pytest.fixture(scope="module")
def served():
    server = Served(open_models())
    yield server
    server.close()

