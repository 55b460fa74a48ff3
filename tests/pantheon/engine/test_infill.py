"""llama.cpp's infill sampler, on cases worked by hand from its rules (llama-sampling.cpp)."""

import numpy as np
import pytest

from pantheon.engine.infill import infill
from pantheon.engine.sampler import Sampler, SamplingParams
from pantheon.errors import InvalidParameter

PIECES = {10: b"ab", 11: b"abc", 12: b"x", 13: b"y", 14: b"z", 15: b"a", 16: b"q", 17: b"m", 18: b"n", 7: b"", 8: b""}


def piece(t):
    return PIECES.get(t, bytes([0x80 + t]))  # the others: one byte each, no one's prefix
EOG = (7, 8)


def run(probs, eog=EOG):
    ids = np.array(list(probs), dtype=np.int64)  # [m]
    logits = np.log(np.array(list(probs.values()), dtype=np.float32))  # [m]
    out = infill(ids, logits, eog, piece)
    return None if out is None else out[0].tolist()


def test_likely_end_tokens_leave_only_them():
    """3 x 0.2 (end) x 3 candidates = 1.8 > 0.8 (text)."""
    assert run({12: 0.5, 13: 0.3, 7: 0.2}) == [7]


def test_a_prefix_takes_its_extensions_probability_then_both_thresholds_cut():
    """ab (0.30) takes abc (0.25): 0.55; x 0.22 passes 0.2, y and z do not; renormalized over 0.77,
    x (0.29) is under 1 / (2 + 1)."""
    assert run({10: 0.30, 11: 0.25, 12: 0.22, 13: 0.13, 14: 0.10}) == [10]


def test_the_likelier_extension_keeps_the_merged_probability():
    """a (0.15) starts ab (0.45): ab keeps 0.6; x (0.4) passes both thresholds (0.4 / 1.0 >= 1/3), where
    with a (0.2), ab (0.5) and x (0.3) it would not (0.3 < 1/3)."""
    assert run({15: 0.15, 10: 0.45, 12: 0.4}) == [10, 12]
    assert run({15: 0.2, 10: 0.5, 12: 0.3}) == [10]


def test_nothing_confident_ends_the_answer():
    assert run({12: 0.17, 13: 0.17, 14: 0.17, 17: 0.17, 16: 0.16, 18: 0.16}) is None
    assert run({12: 0.17, 13: 0.17, 14: 0.17, 15: 0.17, 16: 0.16, 11: 0.16}) == [15]  # a took abc's share


def test_end_tokens_are_kept_whatever_their_probability():
    assert run({16: 0.9, 12: 0.08, 7: 0.02}) == [16, 7]


def test_the_sampler_draws_only_from_the_survivors_and_ends_with_an_end_id():
    n = 20
    logits = np.full(n, -50.0, dtype=np.float32)  # [n]
    logits[[16, 12, 7]] = np.log([0.9, 0.08, 0.02])
    params = SamplingParams(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0, infill=True, seed=3)
    sampler = Sampler(params, n, piece, EOG)
    assert {sampler.sample(logits) for _ in range(300)} <= {16, 7}
    greedy = Sampler(SamplingParams(temperature=0.0, top_k=6, infill=True), n, piece, EOG)
    flat = np.full(n, -50.0, dtype=np.float32)  # [n]
    flat[[12, 13, 14, 17, 16, 18]] = 0.0  # six texts at 1/6 each: nothing is confident
    assert greedy.sample(flat) == 7 and greedy.sample(logits) == 16


@pytest.mark.parametrize("top_k", [0, 257])
def test_infill_needs_top_k_to_bound_its_pairwise_work(top_k):
    with pytest.raises(InvalidParameter) as err:
        SamplingParams(top_k=top_k, infill=True)
    assert err.value.field == "top_k"
