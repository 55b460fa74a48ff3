"""DRY: the cases of llama.cpp's tests/test-sampling.cpp (test_dry), and its limits."""

import numpy as np
import pytest

from pantheon.engine import dry
from pantheon.engine.dry import Dry
from pantheon.engine.sampler import Sampler, SamplingParams
from pantheon.engine.sampler_filters import softmax


def after(probs, history, multiplier, base, allowed, last_n, breakers=()):
    logits = np.log(np.asarray(probs, np.float32))  # [n]
    Dry(multiplier, base, allowed, last_n, breakers).penalize(logits, history)
    return softmax(logits)


@pytest.mark.parametrize("probs, history, expected, multiplier, base, allowed, last_n, breakers", [
    ([0.25] * 4, [0, 1], [0.25] * 4, 1.0, 1.1, 2, 4, ()),
    ([0.25] * 4, [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 1.1, 2, 5, ()),
    ([0.2] * 5, [0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 2, 6, ((3, ()),)),
    ([0.2] * 5, [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 1.1, 2, 5, ()),
    ([0.2] * 5, [0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 4, 7, ()),
])
def test_llama_cpps_cases(probs, history, expected, multiplier, base, allowed, last_n, breakers):
    assert np.allclose(after(probs, history, multiplier, base, allowed, last_n, breakers), expected, atol=1e-5)


def test_the_penalty_grows_with_the_repeated_length():
    """After "a b c d | a b c" the token d continues a 3-token repeat: multiplier * base ** (3 - allowed)."""
    logits = np.zeros(8, np.float32)
    Dry(0.8, 1.75, 2, -1).penalize(logits, [1, 2, 3, 4, 1, 2, 3])
    assert logits[4] == pytest.approx(-0.8 * 1.75) and not np.delete(logits, 4).any()


def test_a_multi_token_breaker_stops_a_repeat_from_reaching_across_it():
    history = [1, 2, 3, 4, 5, 6, 1, 2, 3]  # d = 4 continues "1 2 3"
    whole, cut = np.zeros(8, np.float32), np.zeros(8, np.float32)
    Dry(1.0, 2.0, 2, -1).penalize(whole, history)
    Dry(1.0, 2.0, 2, -1, breakers=((2, (3,)),)).penalize(cut, history)  # "2 3" ends just before the last token
    assert whole[4] < 0 and cut[4] == 0


def test_the_window_and_the_switches():
    history = [1, 2, 3, 4, 1, 2, 3]
    for sampler in (Dry(1.0, 1.75, 2, 3), Dry(1.0, 0.9, 2, -1)):  # the repeat is outside the window; base < 1
        logits = np.zeros(8, np.float32)
        if sampler.active:
            sampler.penalize(logits, history)
        assert not logits.any()
    assert not Dry(0.0, 1.75, 2, -1).active and not Dry(1.0, 1.75, 2, 0).active


def test_a_huge_base_is_clamped_to_a_finite_penalty():
    logits = np.zeros(8, np.float32)
    Dry(1.0, 1e30, 0, -1).penalize(logits, [1, 2, 3] * 20)
    assert np.isfinite(logits).all() and logits.min() < 0


def test_the_sampler_runs_dry_after_the_penalties_and_not_under_mirostat():
    logits = np.log(np.array([0.1, 0.1, 0.1, 0.1, 0.6], np.float32))  # [5]
    history = [0, 1, 2, 4, 0, 1, 2]  # 4 continues a 3-token repeat
    greedy = SamplingParams(temperature=0.0, dry_multiplier=5.0)
    assert Sampler(SamplingParams(temperature=0.0), 5).sample(logits, history) == 4
    assert Sampler(greedy, 5).sample(logits, history) != 4
    mirostat = SamplingParams(dry_multiplier=5.0, mirostat=2, mirostat_tau=0.1)  # the best token alone
    assert Sampler(mirostat, 5).sample(logits, history) == 4


def _brute(backwards, limit):
    """z[k] by definition: how far backwards[k:] agrees with backwards, at most limit (z[0] = 0)."""
    out = [0]
    for k in range(1, len(backwards)):
        n = 0
        while k + n < len(backwards) and backwards[k + n] == backwards[n] and n < limit:
            n += 1
        out.append(n)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_matched_lengths_agree_with_their_definition_on_short_and_long_repeats(seed):
    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 3, rng.integers(1, 60)) for _ in range(8)] + [np.full(200, 1)] * (seed % 2)
    history = np.concatenate(parts + [parts[0]] * 3)  # some repeats longer than QUICK_LENGTH
    backwards = history[::-1]
    for limit in (2, 40, backwards.size):
        assert dry._suffix_matches(backwards, limit).tolist() == _brute(backwards.tolist(), limit)
        assert dry._z_lengths(backwards, limit)[1:].tolist() == _brute(backwards.tolist(), limit)[1:]
