"""Logprobs from the step engine equal log_softmax (float64) of the model's own logits on the same tokens."""

import math

import numpy as np
import pytest

import pantheon
from pantheon.engine.logprobs import MAX_TOP, log_softmax, token_logprob
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.errors import EngineError
from tests.conftest import shared_path

TOL = 1e-4  # batched decode vs one teacher-forced forward: float32 summation order only


@pytest.fixture(scope="module")
def golden():
    path = shared_path("golden", "qwen2-q8_0.gguf")
    ref = np.load(path.with_suffix(".npz"))
    return pantheon.open_model(str(path), threads=2), tuple(ref["tokens"][: int(ref["n_prompt"])].tolist())


def generate(model, prompt, params, k, max_tokens=8, **extra):
    engine = Engine(model, EngineConfig(n_ctx=128))
    engine.add(Request(1, prompt, max_tokens=max_tokens, params=params, logprobs=k, **extra))
    events = []
    while engine.has_work:
        events += engine.step()
    return [e for e in events if isinstance(e, TokenEvent)]


def reference(model, prompt, tokens):
    """float64 log_softmax of every row predicting a generated token, from one teacher-forced forward."""
    rows = model.logits(list(prompt) + list(tokens[:-1]))  # [n_prompt + n - 1, n_vocab]
    logits = np.asarray(rows[len(prompt) - 1:], dtype=np.float64)  # [n, n_vocab]
    peak = logits.max(axis=1, keepdims=True)  # [n, 1]
    return logits - peak - np.log(np.exp(logits - peak).sum(axis=1, keepdims=True))  # [n, n_vocab]


def test_log_softmax_matches_a_direct_float64_computation():
    x = np.random.default_rng(1).normal(0, 30, 1000).astype(np.float32)  # [1000]
    direct = np.log(np.exp(x.astype(np.float64)) / np.exp(x.astype(np.float64)).sum())  # [1000]
    np.testing.assert_allclose(log_softmax(x), direct, rtol=0, atol=1e-9)
    assert math.isclose(np.exp(log_softmax(x)).sum(), 1.0, rel_tol=1e-12)


def test_top_alternatives_are_sorted_best_first_and_tie_to_the_smaller_id():
    x = np.array([1.0, 3.0, 3.0, -2.0, 0.5], np.float32)  # [5]
    scored = token_logprob(x, 3, 4)
    assert [t for t, _ in scored.top] == [1, 2, 0, 4]
    assert scored.logprob == pytest.approx(log_softmax(x)[3])
    assert token_logprob(x, 3, 0).top == ()


def test_rank_counts_the_tokens_at_least_as_likely_as_vllm_does():
    x = np.array([1.0, 3.0, 3.0, -2.0, 0.5, -np.inf], np.float32)  # [6]
    assert [token_logprob(x, t, 0, ranked=True).rank for t in range(6)] == [3, 2, 2, 5, 4, 6]  # a tie ranks both last of it
    rng = np.random.default_rng(3)
    x = rng.integers(-5, 5, 300).astype(np.float32)  # [300], many ties
    for t in rng.integers(0, 300, 20):
        assert token_logprob(x, t, 3, ranked=True).rank == sum(1 for v in x.tolist() if v >= x[t])


def test_greedy_logprobs_equal_log_softmax_of_the_models_logits(golden):
    model, prompt = golden
    events = generate(model, prompt, SamplingParams(temperature=0.0), k=5)
    tokens = [e.token for e in events]
    ref = reference(model, prompt, tokens)
    for i, e in enumerate(events):
        assert e.logprob.token == e.token
        assert e.logprob.logprob == pytest.approx(ref[i, e.token], abs=TOL)
        best = np.argsort(-ref[i], kind="stable")[:5]  # [5]
        assert [t for t, _ in e.logprob.top] == best.tolist()
        np.testing.assert_allclose([lp for _, lp in e.logprob.top], ref[i, best], atol=TOL)
        assert e.logprob.top[0][0] == e.token  # greedy: the chosen token leads its alternatives


def test_sampled_logprobs_are_the_models_distribution_not_the_samplers(golden):
    """Temperature, top-k and penalties change what is drawn, never the reported logprobs."""
    model, prompt = golden
    params = SamplingParams(temperature=1.7, top_k=3, repeat_penalty=1.3, seed=7, logit_bias={5: 4.0})
    events = generate(model, prompt, params, k=MAX_TOP)
    ref = reference(model, prompt, [e.token for e in events])
    for i, e in enumerate(events):
        assert e.logprob.logprob == pytest.approx(ref[i, e.token], abs=TOL)
        assert len(e.logprob.top) == MAX_TOP
        lps = [lp for _, lp in e.logprob.top]
        assert lps == sorted(lps, reverse=True)


def test_no_logprobs_unless_asked(golden):
    model, prompt = golden
    assert all(e.logprob is None for e in generate(model, prompt, SamplingParams(temperature=0.0), k=None))


@pytest.mark.parametrize("k", [-1, MAX_TOP + 1])
def test_out_of_range_logprobs_are_refused(golden, k):
    model, prompt = golden
    engine = Engine(model, EngineConfig(n_ctx=128))
    with pytest.raises(EngineError, match="logprobs"):
        engine.add(Request(1, prompt, params=SamplingParams(), logprobs=k))
    assert not engine.has_work
