"""Fixtures for the HTTP tests: one two-model server per module, closed at the end."""

import pytest

from tests.pantheon.serve.http.server import Served, open_models


@pytest.fixture(scope="module")
def served():
    server = Served(open_models())
    yield server
    server.close()

