"""Field value checks against the engine's types: float32 range, int32 and 64-bit seed bounds, exact JSON types."""

import pytest

from pantheon.serve.http import field_types as ft
from pantheon.serve.http.errors import RequestError


def refused(check, value, name="f"):
    with pytest.raises(RequestError) as err:
        check(name, value)
    assert err.value.status == 400 and err.value.param == name and str(err.value).startswith(f"{name}: ")
    return err.value


@pytest.mark.parametrize("value", [True, "1", None, [1], float("nan"), float("inf"), 3.5e38, -1e39])
def test_number_refuses_what_float32_cannot_hold(value):
    refused(ft.number, value)


@pytest.mark.parametrize("value", [0, -2, 1.5, ft.F32_MAX, -ft.F32_MAX])
def test_number_keeps_representable_values_as_float(value):
    assert ft.number("f", value) == float(value) and type(ft.number("f", value)) is float


def test_divisor_refuses_denormals_but_not_zero():
    assert ft.divisor("f", 0) == 0.0 and ft.divisor("f", ft.F32_TINY) == ft.F32_TINY
    assert refused(ft.divisor, ft.F32_TINY / 2).code == "invalid_value"


@pytest.mark.parametrize("value,ok", [(40.0, 40), (2**31 - 1, 2**31 - 1), (-2**31, -2**31)])
def test_integer_takes_integral_floats_within_int32(value, ok):
    assert ft.integer("f", value) == ok


@pytest.mark.parametrize("value,code", [(2**31, "invalid_value"), (-2**31 - 1, "invalid_value"), (1.5, "invalid_type"),
                                        (True, "invalid_type"), ("3", "invalid_type")])
def test_integer_refusals(value, code):
    assert refused(ft.integer, value).code == code


def test_bounded_integers():
    assert (ft.positive("f", 1), ft.top_k("f", 0), ft.last_n("f", -1)) == (1, 0, -1)
    assert ft.top_k("f", -1) == 0  # vLLM's (and llama.cpp's) way to leave top_k off
    for check, below in ((ft.positive, 0), (ft.top_k, -2), (ft.last_n, -2)):
        assert refused(check, below).code == "invalid_value"


@pytest.mark.parametrize("value,stored", [(-1, 2**64 - 1), (0, 0), (2**64 - 1, 2**64 - 1), (-2**63, 2**63)])
def test_seed_wraps_into_the_unsigned_range(value, stored):
    assert ft.seed("seed", value) == stored


@pytest.mark.parametrize("value", [2**64, -2**63 - 1])
def test_seed_beyond_64_bits_is_refused(value):
    refused(ft.seed, value, "seed")


def test_boolean_and_string_are_exact_json_types():
    assert ft.boolean("f", False) is False and ft.string("f", "") == ""
    for value in (0, 1, "true", None):
        refused(ft.boolean, value)
    for value in (1, None, ["a"], {"a": 1}):
        refused(ft.string, value)


def test_show_cuts_long_values_and_names_containers():
    assert ft.show("x" * 1000).endswith('x...') and len(ft.show("x" * 1000)) == 83
    assert ft.show({"a": 1}) == "dict" and ft.show([1]) == "list" and ft.show(1.5) == "1.5"


def test_only_takes_its_one_value_and_names_the_field_otherwise():
    check = ft.only(False, "beam search is not supported")
    assert check("f", False) is False
    for other in (True, 0, "false", None):
        err = refused(check, other)
        assert err.code == "unsupported_value" and "beam search" in str(err) and "send false" in str(err)
