"""Request checks that need no server: precedence, wrapping, nulls meaning "default"."""

import pytest

from pantheon.serve.http import validate
from pantheon.serve.http.errors import RequestError

USER = [{"role": "developer", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": []}]


def test_max_completion_tokens_wins_and_nulls_mean_default():
    p = validate.check({"messages": USER, "max_tokens": 9, "max_completion_tokens": 3, "temperature": None},
                       validate.CHAT, ("messages",))
    assert p.max_tokens == 3 and "temperature" not in p.sampling
    assert [m["role"] for m in p.messages] == ["system", "assistant"]


def test_negative_seed_wraps_to_the_unsigned_range():
    p = validate.check({"prompt": "x", "seed": -1}, validate.COMPLETIONS, ("prompt",))
    assert p.sampling["seed"] == 2**64 - 1


def test_required_field_and_stream_options():
    with pytest.raises(RequestError) as err:
        validate.check({"model": "m"}, validate.COMPLETIONS, ("prompt",))
    assert err.value.param == "prompt" and err.value.status == 400
    p = validate.check({"prompt": [1, 2], "stream": True, "stream_options": {"include_usage": True}},
                       validate.COMPLETIONS, ("prompt",))
    assert p.include_usage and p.stream and p.prompt == [1, 2]
    with pytest.raises(RequestError) as err:
        validate.check({"prompt": "x", "stream_options": {"include_usage": 1}}, validate.COMPLETIONS, ())
    assert err.value.param == "stream_options.include_usage"
