"""sample_scored: the same draws as Sampler.sample, with the distribution they came from (post_sampling_probs)."""

import math

import numpy as np
import pytest

from pantheon.engine.sampled_probs import sample_scored
from pantheon.engine.sampler import Sampler, SamplingParams

N = 64


@pytest.mark.parametrize("settings", [dict(temperature=0.7, top_k=5), dict(temperature=1.3, top_k=0, top_p=0.9),
                                      dict(temperature=0.0), dict(temperature=0.0, typical_p=0.5),
                                      dict(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.05),
                                      dict(temperature=0.5, dynatemp_range=0.4, min_p=0.1),
                                      dict(temperature=0.9, repeat_penalty=1.3, presence_penalty=0.5)])
def test_the_draws_are_those_of_sample(settings):
    rng = np.random.default_rng(4)
    logits = [rng.standard_normal(N).astype(np.float32) * 3 for _ in range(60)]  # [N] each
    plain, scored = (Sampler(SamplingParams(seed=11, **settings), N) for _ in range(2))
    history = [1, 2, 3]
    for x in logits:
        tok, lp = sample_scored(scored, x, history, 3)
        assert tok == plain.sample(x, history) == lp.token
        values = [v for _, v in lp.top]  # the survivors, likeliest first (min_p may leave fewer than 3)
        assert 1 <= len(values) <= 3 and values == sorted(values, reverse=True) and tok in dict(lp.top) or \
            math.exp(lp.logprob) <= math.exp(values[-1]) + 1e-12
        history.append(tok)


def test_the_probabilities_are_the_softmax_of_the_survivors_under_the_temperature():
    """top_k 3 at temperature 0.5 (no other filter): the three best logits' softmax of logit / 0.5."""
    x = np.array([0.1, 2.0, -1.0, 1.5, 0.7, 3.0], np.float32)  # [6]
    best = [5, 1, 3]
    want = np.exp(x[best] / 0.5) / np.exp(x[best] / 0.5).sum()  # [3]
    sampler = Sampler(SamplingParams(temperature=0.5, top_k=3, top_p=1.0, min_p=0.0, seed=1), 6)
    tok, lp = sample_scored(sampler, x, [], 5)
    assert [t for t, _ in lp.top] == best  # only the survivors, likeliest first
    assert [math.exp(v) for _, v in lp.top] == pytest.approx(want.tolist(), rel=1e-5)
    assert math.exp(lp.logprob) == pytest.approx(want[best.index(tok)], rel=1e-5)


def test_a_greedy_draw_gives_its_token_all_the_probability():
    x = np.array([0.1, 2.0, -1.0, 1.5], np.float32)  # [4]
    tok, lp = sample_scored(Sampler(SamplingParams(temperature=0.0, top_k=3), 4), x, [], 3)
    assert tok == 1 and lp.logprob == 0.0
    assert [(t, v) for t, v in lp.top] == [(1, 0.0), (3, -math.inf), (0, -math.inf)]  # then by logit
