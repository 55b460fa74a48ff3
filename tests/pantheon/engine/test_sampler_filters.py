"""llama.cpp's optional samplers: the cases of llama.cpp's tests/test-sampling.cpp, mirostat's defining behaviour."""

import math

import numpy as np
import pytest

from pantheon.engine import sampler_filters as filters
from pantheon.engine.sampler import Sampler, SamplingParams
from pantheon.errors import InvalidParameter

OPEN = dict(top_k=0, top_p=1.0, min_p=0.0)  # every default filter off


def logits_of(probs):
    return np.log(np.asarray(probs, np.float32))  # [n]


def survivors(ids, pool, n):
    """The probabilities over the whole vocabulary after a filter (0 where a token was removed)."""
    out = np.zeros(n)  # [n]
    out[ids] = filters.softmax(pool)
    return out


# ---- the cases of llama.cpp's test-sampling.cpp (expected probabilities to 1e-5)

@pytest.mark.parametrize("probs, mass, kept", [([0.97, 0.01, 0.01, 0.01], 0.5, [0]),
                                                ([0.4, 0.2, 0.2, 0.2], 0.5, [1, 2, 3])])
def test_typical_keeps_the_tokens_whose_surprise_is_nearest_the_entropy(probs, mass, kept):
    logits = logits_of(probs)
    ids, pool = filters.typical(np.arange(4), logits, mass)
    assert sorted(ids.tolist()) == kept
    assert np.allclose(np.sort(np.exp(pool)), np.sort(np.asarray(probs)[kept]), atol=1e-6)


@pytest.mark.parametrize("threshold, kept", [(0.09, [3]), (0.19, [2, 3]), (0.29, [1, 2, 3]), (0.39, [0, 1, 2, 3])])
def test_xtc_removes_every_top_choice_but_the_least_likely(threshold, kept):
    probs = [0.4, 0.3, 0.2, 0.1]
    ids, _ = filters.xtc(np.arange(4), logits_of(probs), threshold)
    assert sorted(ids.tolist()) == kept


@pytest.mark.parametrize("n, expected", [(1.0, [0.0, 0.0, 0.428571, 0.571429]), (0.0, [0.1, 0.2, 0.3, 0.4]),
                                         (3.0, [0.1, 0.2, 0.3, 0.4])])
def test_top_n_sigma_keeps_what_is_within_n_deviations_of_the_best(n, expected):
    sampler = Sampler(SamplingParams(top_n_sigma=n, **OPEN), 4)
    logits = logits_of([0.1, 0.2, 0.3, 0.4])
    ids, pool = sampler.candidates(logits, float(logits.max()))
    assert np.allclose(survivors(ids, pool, 4), expected, atol=1e-5)


def test_a_dynamic_temperature_without_a_range_is_the_temperature():
    pool = logits_of([0.1, 0.2, 0.3, 0.4])
    assert filters.dynamic_temperature(pool, 1.0, 0.0, 1.0) == 1.0
    assert filters.dynamic_temperature(pool, 0.0, 0.0, 1.0) == 0.0


# ---- behaviour the samplers are defined by

def test_a_dynamic_temperature_rises_with_the_entropy():
    flat, sharp = np.zeros(8, np.float32), np.array([10.0] + [-10.0] * 7, np.float32)
    assert filters.dynamic_temperature(flat, 1.0, 0.5, 1.0) == pytest.approx(1.5)
    assert filters.dynamic_temperature(sharp, 1.0, 0.5, 1.0) == pytest.approx(0.5, abs=1e-6)
    assert filters.dynamic_temperature(sharp, 0.2, 0.5, 1.0) == pytest.approx(0.0, abs=1e-6)  # never below 0
    half = filters.dynamic_temperature(logits_of([0.5, 0.5, 1e-9, 1e-9]), 1.0, 0.5, 1.0)
    assert half == pytest.approx(0.5 + 1.0 * math.log(2) / math.log(4), abs=1e-6)


def zipf(n, s):
    return (1.0 / np.arange(1, n + 1) ** s).astype(np.float32)  # [n]


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat_holds_the_average_surprise_at_tau(version):
    """Mirostat's purpose: the surprise (-log2 p of the drawn token under the truncated distribution) averages
    tau, whatever the distribution (here a Zipf law of exponent 1.1 over 2,000 tokens, whose untruncated
    draws average about 6.6 bits)."""
    logits = np.log(zipf(2000, 1.1))
    tau, rng = 3.0, np.random.default_rng(7)
    mirostat = filters.Mirostat(version, tau, 0.1, 2000)
    surprises = []
    for _ in range(3000):
        ids, probs = mirostat._truncated(logits)
        before = mirostat.mu
        token = mirostat.draw(logits, rng)
        surprise = -math.log2(probs[list(ids).index(token)])
        assert mirostat.mu == pytest.approx(before - 0.1 * (surprise - tau))  # the learning rule
        surprises.append(surprise)
    assert np.mean(surprises[500:]) == pytest.approx(tau, abs=0.25)


def test_mirostat_v1_fits_the_zipf_exponent_of_a_zipf_law():
    """On an exact Zipf law p_i ~ i^-s the estimate s_hat is s, so k follows from mu by the paper's formula."""
    s, n = 1.3, 5000
    probs = zipf(n, s) / zipf(n, s).sum()
    mirostat = filters.Mirostat(1, 2.0, 0.1, n)
    eps = s - 1.0
    want = (eps * 2.0 ** mirostat.mu / (1.0 - n ** -eps)) ** (1.0 / s)
    assert mirostat._k(probs.astype(np.float64)) == int(want)


def test_mirostat_v2_keeps_only_tokens_no_more_surprising_than_mu():
    mirostat = filters.Mirostat(2, 1.0, 0.1, 4)  # mu = 2 bits: p >= 0.25
    ids, probs = mirostat._truncated(logits_of([0.1, 0.2, 0.3, 0.4]))
    assert ids.tolist() == [3, 2] and np.allclose(probs, [0.4 / 0.7, 0.3 / 0.7])
    mirostat.mu = 0.5  # nothing is that likely: the best token alone
    assert mirostat._truncated(logits_of([0.1, 0.2, 0.3, 0.4]))[0].tolist() == [3]


# ---- min_keep, as llama.cpp's filters apply it

PROBS = [0.5, 0.3, 0.15, 0.05]


def kept(min_keep, **filters_on):
    sampler = Sampler(SamplingParams(**dict(OPEN, **filters_on), min_keep=min_keep), 4)
    logits = logits_of(PROBS)
    return sorted(sampler.candidates(logits, float(logits.max()))[0].tolist())


@pytest.mark.parametrize("min_keep, expected", [(0, [0]), (1, [0]), (3, [0, 1, 2]), (9, [0, 1, 2, 3])])
def test_top_p_keeps_at_least_min_keep(min_keep, expected):
    assert kept(min_keep, top_p=0.5) == expected


@pytest.mark.parametrize("min_keep, expected", [(0, [0]), (2, [0, 1]), (9, [0, 1, 2, 3])])
def test_min_p_keeps_at_least_min_keep_best(min_keep, expected):
    assert kept(min_keep, min_p=0.9) == expected


def test_top_p_and_min_p_together_keep_min_keep_in_either_order():
    """llama.cpp runs top_p then min_p; both keep a best-first prefix of at least min_keep, so the result is
    the shorter prefix whatever the order."""
    assert kept(2, top_p=0.95, min_p=0.9) == [0, 1]
    assert kept(3, top_p=0.5, min_p=0.2) == [0, 1, 2]


def test_typical_keeps_at_least_min_keep():
    ids, _ = filters.typical(np.arange(4), logits_of([0.97, 0.01, 0.01, 0.01]), 0.5, min_keep=3)
    assert ids.size == 3 and 0 in ids.tolist()


@pytest.mark.parametrize("min_keep, expected", [(0, [2, 3]), (2, [2, 3]), (3, [0, 1, 2, 3])])
def test_xtc_removes_nothing_when_fewer_than_min_keep_would_be_left(min_keep, expected):
    ids, _ = filters.xtc(np.arange(4), logits_of([0.4, 0.3, 0.2, 0.1]), 0.19, min_keep)
    assert sorted(ids.tolist()) == expected


def test_top_k_ignores_min_keep_as_llama_cpp_does():
    assert kept(3, top_k=1) == [0]


# ---- the chain

def test_typical_may_drop_the_best_token_and_min_p_then_measures_from_the_new_best():
    sampler = Sampler(SamplingParams(typical_p=0.5, min_p=0.99, top_k=0, top_p=1.0), 4)
    logits = logits_of([0.4, 0.2, 0.2, 0.2])
    ids, _ = sampler.candidates(logits, float(logits.max()))
    assert sorted(ids.tolist()) == [1, 2, 3]


def test_xtc_runs_with_its_probability_and_a_seed_repeats_it():
    logits = logits_of([0.4, 0.3, 0.2, 0.1])
    always = Sampler(SamplingParams(xtc_probability=1.0, xtc_threshold=0.15, seed=1, **OPEN), 4)
    assert {always.sample(logits) for _ in range(50)} <= {2, 3}
    never = Sampler(SamplingParams(xtc_probability=1.0, xtc_threshold=0.6, seed=1, **OPEN), 4)
    assert 0 in {never.sample(logits) for _ in range(200)}  # a threshold above 0.5 turns it off
    runs = [Sampler(SamplingParams(xtc_probability=0.5, xtc_threshold=0.15, seed=9, **OPEN), 4) for _ in range(2)]
    first, second = ([run.sample(logits) for _ in range(40)] for run in runs)
    assert first == second and len(set(first)) > 1


def test_mirostat_skips_the_penalties_and_keeps_the_bias_as_llama_cpp_does():
    logits = logits_of([0.1, 0.2, 0.3, 0.4])
    params = SamplingParams(mirostat=2, mirostat_tau=0.1, repeat_penalty=100.0, seed=3)  # mu 0.2 bits: best only
    assert not params.penalizes
    assert Sampler(params, 4).sample(logits, history=[3, 3, 3]) == 3
    banned = SamplingParams(mirostat=2, mirostat_tau=0.1, logit_bias={3: -math.inf}, seed=3)
    assert Sampler(banned, 4).sample(logits) == 2


def test_temperature_zero_takes_the_best_survivor_of_the_filters_as_llama_cpp_does():
    """llama.cpp runs typical_p and XTC before the temperature, whose 0 then keeps the best token left; dynamic
    temperature makes 0 a range; mirostat runs behind a plain temperature, and top_k / top_p / min_p /
    top_n_sigma never drop the best token."""
    logits = logits_of([0.4, 0.3, 0.2, 0.1])
    greedy = lambda **extra: Sampler(SamplingParams(temperature=0.0, seed=5, **extra), 4).sample(logits)
    assert greedy(xtc_probability=1.0, xtc_threshold=0.09) == 3  # all four reach it: all but the least likely go
    assert greedy(xtc_probability=1.0, xtc_threshold=0.25) == 1  # 0.4 and 0.3 reach it: only 0.4 goes
    assert greedy(typical_p=0.1) == 1  # surprise ln(1/0.3) is the nearest to the entropy, 1.28 nats
    for extra in (dict(mirostat=1), dict(top_k=2, top_p=0.1, min_p=0.9, top_n_sigma=0.1), dict(xtc_threshold=0.1),
                  dict(xtc_probability=1.0, xtc_threshold=0.6)):
        assert greedy(**extra) == 0
    spread = Sampler(SamplingParams(temperature=0.0, dynatemp_range=2.0, seed=5), 4)
    assert len({spread.sample(logits) for _ in range(40)}) > 1  # entropy 0.92 of the most: about temperature 1.85
    assert SamplingParams(temperature=0.0).greedy and not SamplingParams(temperature=0.0, typical_p=0.5).greedy


@pytest.mark.parametrize("field, value", [("typical_p", 1.5), ("typical_p", -0.1), ("xtc_probability", 2.0),
                                          ("xtc_threshold", -1.0), ("dynatemp_range", -0.5),
                                          ("dynatemp_exponent", -1.0), ("mirostat", 3), ("mirostat", 1.0),
                                          ("mirostat_tau", -1.0), ("mirostat_eta", math.nan), ("top_n_sigma", math.inf),
                                          ("min_keep", -1), ("min_keep", 2**31), ("min_keep", 1.5)])
def test_out_of_range_settings_are_refused_by_name(field, value):
    with pytest.raises(InvalidParameter) as err:
        SamplingParams(**{field: value})
    assert err.value.field == field


def test_mirostat_and_the_infill_sampler_do_not_combine():
    with pytest.raises(InvalidParameter) as err:
        SamplingParams(mirostat=2, infill=True, top_k=5)
    assert err.value.field == "mirostat"
