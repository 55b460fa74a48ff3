"""Request bodies as bounded, strict JSON: deep nesting and NaN literals are 400s, never a crash."""

import io

import pytest

from pantheon.serve.http import json_body
from pantheon.serve.http.errors import RequestError


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
                                 b'{"prompt": "x", "stop": ' + b"[" * 40 + b"]" * 40 + b"}"])
def test_deep_nesting_is_a_400_not_a_recursion_error(raw):
    with pytest.raises(RequestError) as err:
        json_body.parse_json(raw)
    assert err.value.status == 400 and "nests deeper" in str(err.value)


@pytest.mark.parametrize("raw", [b'{"temperature": NaN}', b'{"top_p": Infinity}', b'{"x": -Infinity}'])
def test_non_standard_json_constants_are_refused(raw):
    with pytest.raises(RequestError) as err:
        json_body.parse_json(raw)
    assert err.value.code == "invalid_json"


def test_moderate_nesting_and_null_bodies_parse():
    assert json_body.parse_json(b"[" * 32 + b"]" * 32) is not None
    assert json_body.parse_json(b"null") is None


class _Request:
    """What read_json uses of a falcon request: the declared length and the bounded body stream."""

    def __init__(self, raw, declared):
        self.content_length, self.bounded_stream = declared, io.BytesIO(raw)


@pytest.mark.parametrize("declared", [None, 5])
def test_a_body_over_the_limit_is_413_whatever_its_header_says(declared):
    with pytest.raises(RequestError) as err:
        json_body.read_json(_Request(b'{"a": "' + b"x" * 64 + b'"}', declared), limit=32)
    assert err.value.status == 413 and err.value.code == "request_too_large"


def test_a_declared_length_over_the_limit_is_refused_before_reading():
    req = _Request(b"{}", declared=10**9)
    with pytest.raises(RequestError, match="1000000000 bytes exceeds the 32-byte limit"):
        json_body.read_json(req, limit=32)
    assert req.bounded_stream.tell() == 0


def test_a_body_at_the_limit_parses():
    assert json_body.read_json(_Request(b'{"a": 1}', None), limit=8) == {"a": 1}
