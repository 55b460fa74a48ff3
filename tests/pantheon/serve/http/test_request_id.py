"""X-Request-Id: every answer carries one, the client's own when it is sane."""

import re

import openai
import pytest

from pantheon.serve.http.request_id import request_id
from tests.pantheon.serve.http.server import call

FRESH = re.compile(r"req_[0-9a-f]{24}")


@pytest.mark.parametrize("sent", ["abc-123", "4bf92f3577b34da6a3ce929d0e0e4736", "trace/span:1.2+x=", "a" * 128])
def test_a_sane_client_id_is_kept(sent):
    assert request_id(sent) == sent


@pytest.mark.parametrize("sent", [None, "", "a" * 129, "two words", "x\r\nSet-Cookie: y", "é", "a;b", "<script>"])
def test_anything_else_is_replaced_by_a_fresh_id(sent):
    assert FRESH.fullmatch(request_id(sent))


def test_fresh_ids_differ():
    assert len({request_id(None) for _ in range(1000)}) == 1000


@pytest.mark.parametrize("method,path,body,status", [
    ("GET", "/v1/models", None, 200),
    ("POST", "/v1/completions", {"model": "qwen2", "prompt": "Hi", "max_tokens": 1}, 200),
    ("POST", "/v1/completions", {"model": "qwen2", "prompt": "Hi", "max_tokens": 0}, 400),
    ("GET", "/no/such/route", None, 404), ("DELETE", "/v1/models", None, 405), ("GET", "/health", None, 200),
    ("POST", "/v1/chat/completions", {"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}],
                                      "max_tokens": 2, "stream": True}, 200)])
def test_every_answer_carries_an_id_and_echoes_the_clients(served, method, path, body, status):
    got, hdrs, _ = call(served.port, method, path, body)
    assert got == status and FRESH.fullmatch(hdrs["X-Request-Id"])
    got, hdrs, _ = call(served.port, method, path, body, headers={"X-Request-Id": "client-7"})
    assert got == status and hdrs["X-Request-Id"] == "client-7"


def test_the_openai_client_exposes_it(client):
    out = client.completions.create(model="qwen2", prompt="Hi", max_tokens=1)
    assert FRESH.fullmatch(out._request_id)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="qwen2", prompt="Hi", max_tokens=0)
    assert FRESH.fullmatch(err.value.request_id)
