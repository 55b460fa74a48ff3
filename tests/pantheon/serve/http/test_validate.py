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
    assert p.include_usage and p.stream and p.prompt == [[1, 2]]
    with pytest.raises(RequestError) as err:
        validate.check({"prompt": "x", "stream_options": {"include_usage": 1}}, validate.COMPLETIONS, ())
    assert err.value.param == "stream_options.include_usage"


@pytest.mark.parametrize("field, value", [
    ("frequency_penalty", -3.5e38), ("presence_penalty", 1e300), ("temperature", 1e-40),
    ("repeat_penalty", 1e-45), ("repeat_penalty", 5e-324), ("top_p", 1e39), ("min_p", -1e39),
    ("top_k", 2**31), ("top_k", 1e300), ("repeat_last_n", 2**63), ("max_tokens", 2**31), ("seed", 2**64),
    ("seed", -2**63 - 1), ("logit_bias", {"5": 1e39}), ("logit_bias", {"\u00b2": 1.0}),
    ("logit_bias", {"\u0661": 1.0}), ("logit_bias", {"99999999999": 1.0}), ("logit_bias", {"1" * 5000: 1.0}),
])
def test_numbers_float32_and_int32_cannot_hold_are_400_naming_the_field(field, value):
    """The issue's 500s: floats beyond float32, top_k >= 2^31, unicode-digit keys, underflowing divisors."""
    with pytest.raises(RequestError) as err:
        validate.check({"prompt": "x", field: value}, validate.COMPLETIONS, ("prompt",))
    assert err.value.status == 400 and err.value.param.startswith(field)
    assert len(str(err.value)) < 400


def test_extreme_but_representable_values_pass():
    p = validate.check({"prompt": "x", "frequency_penalty": -3.4e38, "repeat_penalty": 1.2e-38, "top_k": 2**31 - 1,
                        "logit_bias": {" 7 ": -3.4e38}}, validate.COMPLETIONS, ("prompt",))
    assert p.sampling["logit_bias"] == {7: -3.4e38} and p.sampling["top_k"] == 2**31 - 1


@pytest.mark.parametrize("role", [["user"], {"a": 1}, 1, None, True])
def test_a_role_that_is_not_a_string_is_400(role):
    with pytest.raises(RequestError) as err:
        validate.check({"messages": [{"role": role, "content": "x"}]}, validate.CHAT, ("messages",))
    assert err.value.param == "messages[0].role"


def test_up_to_32_stop_strings_as_llama_server_clients_send():
    stops = [f"\n{name}:" for name in range(32)]
    assert validate.check({"prompt": "x", "stop": stops}, validate.COMPLETIONS, ("prompt",)).stop == tuple(stops)
    with pytest.raises(RequestError) as err:
        validate.check({"prompt": "x", "stop": stops + ["one more"]}, validate.COMPLETIONS, ("prompt",))
    assert err.value.param == "stop" and "at most 32" in str(err.value)
