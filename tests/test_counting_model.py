"""The counting model really counts, through our engine, with a wide margin (the soak's oracle)."""

import numpy as np
import pytest

import pantheon
from pantheon.engine.scheduler import Engine, EngineConfig, Request
from pantheon.engine.sampler import SamplingParams
from tests.conftest import shared_path
from tests.counting_model import build, expected_ids


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build(tmp_path_factory.mktemp("counting") / "counting.gguf", shared_path("golden", "llama-f32.gguf"))


def greedy(model, prompt, n):
    engine = Engine(model, EngineConfig(n_ctx=1024))
    engine.add(Request(1, tuple(prompt), n, SamplingParams(temperature=0.0)))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if hasattr(e, "token")]
    return out


@pytest.mark.parametrize("start,n", [(300, 40), (1234, 17), (1990, 3)])
def test_greedy_counts(model_path, start, n):
    model = pantheon.open_model(str(model_path), threads=1)
    assert greedy(model, [start], n) == expected_ids(start, n)


def test_a_continuation_counts_on(model_path):
    """What recovery resubmits (prompt plus the tokens already sent) continues the same count."""
    model = pantheon.open_model(str(model_path), threads=1)
    assert greedy(model, [500, 501, 502, 503], 5) == expected_ids(503, 5)


def test_the_margin_is_wide(model_path):
    from gguf import GGUFReader

    tensors = {t.name: np.array(t.data) for t in GGUFReader(str(model_path)).tensors}
    embd, out = tensors["token_embd.weight"], tensors["output.weight"]  # [V, dim] each
    hidden = embd[300:2300] / np.sqrt(np.mean(embd[300:2300] ** 2, axis=1, keepdims=True))  # [2000, dim] rms-normed
    logits = hidden @ out.T  # [2000, V]
    top = logits[np.arange(2000), np.arange(301, 2301)]  # [2000] logit of t + 1
    logits[np.arange(2000), np.arange(301, 2301)] = -np.inf
    assert (top - logits.max(axis=1)).min() > 100


def test_the_expected_text_is_ordered(model_path):
    tok = pantheon.open_tokenizer(str(model_path))
    a, b = tok.decode(expected_ids(300, 20)), tok.decode(expected_ids(300, 10) + expected_ids(311, 10)[::-1])
    assert a != b and a != tok.decode(expected_ids(300, 9) + expected_ids(300, 1) + expected_ids(310, 10))
