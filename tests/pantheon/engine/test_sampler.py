"""Sampler: each control of llama.cpp's chain checked on crafted logits against its definition."""

import dataclasses
import math

import numpy as np
from hypothesis import assume, given, settings, strategies as st
import pytest

from pantheon.errors import EngineError, InvalidParameter
from pantheon.engine.sampler import Sampler, SamplingParams

# Probabilities 0.5, 0.3, 0.15, 0.05 as logits.
PROBS = np.array([0.5, 0.3, 0.15, 0.05])
LOGITS = np.log(PROBS).astype(np.float32)
PLAIN = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)

F32_MAX, F32_TINY = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)


def draws(params, logits, count=2000, history=()):
    sampler = Sampler(params, logits.size)
    return np.array([sampler.sample(logits, history) for _ in range(count)])


def kept(logits, **kw):
    sampler = Sampler(SamplingParams(**dict(PLAIN, **kw)), logits.size)
    ids, _ = sampler.candidates(logits, float(logits.max()))
    return set(ids.tolist())


def test_same_seed_same_sequence_and_samplers_are_independent():
    logits = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    params = SamplingParams(**dict(PLAIN, seed=1234))
    a, b = Sampler(params, 1000), Sampler(params, 1000)
    interleaved = [(a.sample(logits), b.sample(logits)) for _ in range(200)]
    assert [x for x, _ in interleaved] == [y for _, y in interleaved]
    other = draws(SamplingParams(**dict(PLAIN, seed=4321)), logits, 200)
    assert other.tolist() != [x for x, _ in interleaved]


def test_unseeded_samplers_differ():
    logits = np.zeros(1000, np.float32)
    assert draws(SamplingParams(**PLAIN), logits, 50).tolist() != draws(SamplingParams(**PLAIN), logits, 50).tolist()


def test_greedy_is_argmax_after_bias_and_penalties():
    logits = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    best = int(np.argmax(logits))
    assert set(draws(SamplingParams(temperature=0.0), logits, 20).tolist()) == {best}
    banned = SamplingParams(temperature=0.0, logit_bias={best: -math.inf})
    second = int(np.argsort(logits)[-2])
    assert Sampler(banned, 5000).sample(logits) == second
    penalized = SamplingParams(temperature=0.0, repeat_penalty=1.0, presence_penalty=100.0)
    assert Sampler(penalized, 5000).sample(logits, [best]) == second


def test_top_k_only_yields_the_k_best():
    logits = np.random.default_rng(2).standard_normal(50_000).astype(np.float32)
    top2 = set(np.argsort(logits)[-2:].tolist())
    seen = set(draws(SamplingParams(**dict(PLAIN, top_k=2, seed=3)), logits, 2000).tolist())
    assert seen == top2


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_top_k_pool_is_exact_whatever_the_layout(order):
    logits = np.arange(10_000, dtype=np.float32)  # [10000]
    logits = {"ascending": logits, "descending": logits[::-1].copy(),
              "shuffled": np.random.default_rng(5).permutation(logits)}[order]
    assert kept(logits, top_k=37) == set(np.argsort(logits)[-37:].tolist())


def test_top_p_keeps_smallest_prefix_reaching_p():
    assert kept(LOGITS, top_p=0.4) == {0}
    assert kept(LOGITS, top_p=0.75) == {0, 1}
    assert kept(LOGITS, top_p=0.85) == {0, 1, 2}
    assert kept(LOGITS, top_p=0.0) == {0}
    assert set(draws(SamplingParams(**dict(PLAIN, top_p=0.75, seed=5)), LOGITS, 2000).tolist()) == {0, 1}


def test_top_p_measures_mass_after_top_k_like_llama_cpp():
    # Over the top-2 pool token 0 holds 0.5 / 0.8 = 0.625 of the mass.
    assert kept(LOGITS, top_k=2, top_p=0.6) == {0}
    assert kept(LOGITS, top_k=0, top_p=0.6) == {0, 1}


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
def test_top_p_on_a_large_flat_vocab_matches_a_full_sort(top_p):
    logits = np.random.default_rng(4).standard_normal(40_000).astype(np.float32)
    probs = np.exp(logits.astype(np.float64) - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    count = int(np.searchsorted(np.cumsum(probs[order]), top_p)) + 1
    assert kept(logits, top_p=top_p) == set(order[:count].tolist())


def test_min_p_drops_tokens_below_fraction_of_best():
    assert kept(LOGITS, min_p=0.2) == {0, 1, 2}  # threshold 0.1
    assert kept(LOGITS, min_p=0.5) == {0, 1}  # threshold 0.25
    assert kept(LOGITS, min_p=1.0) == {0}
    assert set(draws(SamplingParams(**dict(PLAIN, min_p=0.5, seed=6)), LOGITS, 2000).tolist()) == {0, 1}


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_scales_logits_before_the_draw(temperature):
    logits = np.array([1.0, 0.0], np.float32)
    got = np.mean(draws(SamplingParams(**dict(PLAIN, temperature=temperature, seed=7)), logits, 20_000) == 0)
    expected = 1.0 / (1.0 + math.exp(-1.0 / temperature))
    assert abs(got - expected) < 0.015, (got, expected)


def test_measured_frequencies_follow_softmax():
    counts = np.bincount(draws(SamplingParams(**dict(PLAIN, seed=8)), LOGITS, 20_000), minlength=4)
    assert np.allclose(counts / 20_000, PROBS, atol=0.015)


def test_penalties_follow_llama_cpp_formula():
    logits = np.array([2.0, -1.0, 0.5, 3.0], np.float32)
    history = [2, 0, 0, 1, 0]  # the last 4: token 0 three times, token 1 once
    params = SamplingParams(repeat_penalty=1.5, repeat_last_n=4, frequency_penalty=0.25, presence_penalty=0.5)
    out = Sampler(params, 4).adjust(logits, history)
    expected = [2.0 / 1.5 - (3 * 0.25 + 0.5), -1.0 * 1.5 - (1 * 0.25 + 0.5), 0.5, 3.0]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert logits.tolist() == [2.0, -1.0, 0.5, 3.0]
    everything = Sampler(dataclasses.replace(params, repeat_last_n=-1), 4).adjust(logits, history)
    assert everything[2] == pytest.approx(0.5 / 1.5 - 0.75)
    off = Sampler(dataclasses.replace(params, repeat_last_n=0), 4).adjust(logits, history)
    assert off.tolist() == logits.tolist()


def test_logit_bias_comes_before_penalties_as_in_llama_cpp():
    params = SamplingParams(repeat_penalty=2.0, logit_bias={0: 1.0})
    out = Sampler(params, 2).adjust(np.array([2.0, 0.0], np.float32), [0])
    assert out[0] == pytest.approx((2.0 + 1.0) / 2.0)


def test_logit_bias_adds_and_bans():
    params = SamplingParams(**dict(PLAIN, logit_bias={0: -math.inf, 3: math.log(10.0)}, seed=9))
    counts = np.bincount(draws(params, LOGITS, 20_000), minlength=4)
    assert counts[0] == 0
    expected = np.array([0.0, 0.3, 0.15, 0.5]) / 0.95
    assert np.allclose(counts / 20_000, expected, atol=0.015)


def test_allowed_ids_draw_from_those_tokens_renormalized_as_vllm_masks_the_rest():
    params = SamplingParams(**dict(PLAIN, allowed_ids=(1, 3), seed=10))
    counts = np.bincount(draws(params, LOGITS, 20_000), minlength=4)
    assert counts[0] == counts[2] == 0
    assert np.allclose(counts / 20_000, np.array([0.0, 0.3, 0.0, 0.05]) / 0.35, atol=0.015)
    assert Sampler(SamplingParams(temperature=0.0, allowed_ids=(2, 3)), 4).sample(LOGITS) == 2  # greedy too
    with pytest.raises(InvalidParameter) as err:
        Sampler(SamplingParams(allowed_ids=(4,)), 4)
    assert err.value.field == "allowed_ids"


def test_everything_banned_degrades_to_the_greedy_raw_token():
    params = SamplingParams(logit_bias={0: -math.inf, 1: -math.inf})
    assert Sampler(params, 2).sample(np.array([0.5, 2.0], np.float32)) == 1


@pytest.mark.parametrize("extreme", [
    dict(frequency_penalty=-3e38), dict(frequency_penalty=3e38), dict(presence_penalty=-3.4e38),
    dict(repeat_penalty=F32_TINY), dict(repeat_penalty=3.4e38), dict(temperature=F32_TINY),
    dict(temperature=3.4e38), dict(logit_bias={0: 3.4e38, 1: 3.4e38}), dict(logit_bias={0: -3.4e38}),
    dict(min_p=F32_TINY), dict(top_p=F32_TINY), dict(top_k=2**31 - 1),
])
def test_extreme_valid_parameters_never_raise(extreme):
    """The issue's poison requests: valid values whose float32 arithmetic overflows still give a token."""
    params = SamplingParams(**dict(dict(repeat_last_n=-1, seed=3), **extreme))
    logits = np.array([1.0, 3.0, -2.0, 0.5], np.float32)
    token = Sampler(params, 4).sample(logits, history=[1, 1, 0, 1])
    assert 0 <= token < 4


EXTREMES = st.floats() | st.sampled_from([F32_MAX, -F32_MAX, F32_TINY, -F32_TINY, 5e-324, 1e-45, 0.0, 1.0])


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "temperature": EXTREMES, "top_k": st.integers(-1, 2**32), "top_p": EXTREMES, "min_p": EXTREMES,
    "repeat_penalty": EXTREMES, "repeat_last_n": st.integers(-2, 10), "presence_penalty": EXTREMES,
    "frequency_penalty": EXTREMES, "logit_bias": st.dictionaries(st.integers(0, 7), EXTREMES, max_size=8)}),
    st.lists(st.floats(-1e4, 1e4, width=32), min_size=8, max_size=8), st.lists(st.integers(0, 7), max_size=12))
def test_any_accepted_parameters_sample_a_token(kwargs, logits, history):
    """Whatever SamplingParams accepts, sample() returns a token id (never raises, never NaN-indexes)."""
    try:
        params = SamplingParams(**kwargs, seed=1)
    except InvalidParameter:
        assume(False)
    assert 0 <= Sampler(params, 8).sample(np.array(logits, np.float32), history) < 8


@pytest.mark.parametrize("field, value", [
    ("temperature", 1e-40), ("repeat_penalty", 1e-45), ("frequency_penalty", -3.5e38),
    ("presence_penalty", 1e39), ("top_k", 2**31), ("repeat_last_n", 2**31), ("logit_bias", {1: 1e39}),
])
def test_values_outside_float32_or_denormal_divisors_are_refused(field, value):
    with pytest.raises(InvalidParameter, match=field):
        SamplingParams(**{field: value})


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
    ("top_k", -1), ("top_k", 2.5), ("top_k", True),
    ("top_p", 1.01), ("top_p", -0.1), ("top_p", math.nan),
    ("min_p", 1.5), ("min_p", math.nan),
    ("repeat_penalty", 0.0), ("repeat_penalty", math.nan), ("repeat_last_n", -2),
    ("presence_penalty", math.inf), ("frequency_penalty", math.nan), ("frequency_penalty", "1"),
    ("seed", -1), ("seed", 2**64), ("seed", 1.5),
    ("logit_bias", {-1: 1.0}), ("logit_bias", {"7": 1.0}), ("logit_bias", {1: math.nan}),
    ("logit_bias", {1: math.inf}), ("logit_bias", [(1, 2.0)]),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(InvalidParameter, match=field) as info:
        SamplingParams(**{field: value})
    assert info.value.field == field
    assert isinstance(info.value, EngineError)


def test_bias_id_beyond_vocab_is_refused_by_the_sampler():
    params = SamplingParams(logit_bias={100: 1.0})
    Sampler(params, 101)
    with pytest.raises(InvalidParameter, match="logit_bias") as info:
        Sampler(params, 100)
    assert info.value.field == "logit_bias"


def test_params_are_frozen():
    params = SamplingParams(logit_bias={1: 2.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.temperature = 0.0
    with pytest.raises(TypeError):
        params.logit_bias[1] = 3.0


def test_choice_i_samples_with_seed_plus_i_wrapping_and_unseeded_stays_unseeded():
    params = SamplingParams(seed=2**64 - 2, top_k=7)
    assert params.for_choice(0) is params
    assert [params.for_choice(c).seed for c in (1, 2, 3)] == [2**64 - 1, 0, 1]
    assert params.for_choice(3).top_k == 7
    assert SamplingParams().for_choice(5).seed is None
