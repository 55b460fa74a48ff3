"""Batched steps and KV-prefix extension give the same logits as computing each sequence alone."""

import numpy as np
import pytest

import pantheon
from tests.conftest import shared_path


@pytest.fixture(scope="module", params=["llama-q4_0", "qwen2-q8_0", "llama-q4_k_m", "qwen3moe-q8_0", "mixtral-q8_0"])
def model(request):
    return pantheon.open_model(str(shared_path("golden", f"{request.param}.gguf")), threads=2)


def seqs(n_vocab):
    rng = np.random.default_rng(7)
    return [rng.integers(3, n_vocab, size=n).tolist() for n in (3, 9, 1, 17)]


def test_batched_step_equals_each_alone(model):
    prompts = seqs(model.config.n_vocab)
    alone = [model.logits(p)[-1] for p in prompts]
    caches = [model.new_cache(64) for _ in prompts]
    batched = model.forward(list(zip(caches, prompts)))
    for a, b in zip(alone, batched):
        np.testing.assert_allclose(b[-1], a, rtol=1e-4, atol=1e-4)
    # A decode step for all four at once (one weight pass) against each continued alone.
    nxt = [int(a.argmax()) for a in alone]
    step = model.forward([(c, [t]) for c, t in zip(caches, nxt)])
    for p, t, b in zip(prompts, nxt, step):
        np.testing.assert_allclose(b[-1], model.logits(p + [t])[-1], rtol=1e-4, atol=1e-4)


def test_extending_stored_kv_equals_recompute(model):
    full = seqs(model.config.n_vocab)[3] + seqs(model.config.n_vocab)[1]
    ref = model.logits(full)
    cache = model.new_cache(64)
    model.forward([(cache, full[:10])])
    cache.truncate(6)  # prefix reuse: keep 6 positions, recompute the rest
    ext = model.forward([(cache, full[6:])], all_logits=True)[0]
    np.testing.assert_allclose(ext, ref[6:], rtol=1e-4, atol=1e-4)
    assert len(cache) == len(full) and cache.common_prefix(full) == len(full)


def test_eight_streams_decode_greedily_as_each_alone(model):
    """Eight sequences of different lengths decoded together (one weight pass and one attention call
    per layer and step) pick the same greedy tokens as each sequence decoded on its own."""
    rng = np.random.default_rng(11)
    prompts = [rng.integers(3, model.config.n_vocab, size=n).tolist() for n in (2, 5, 1, 8, 3, 13, 4, 6)]
    caches = [model.new_cache(64) for _ in prompts]
    rows = [r[-1] for r in model.forward(list(zip(caches, prompts)))]
    together = [[int(r.argmax())] for r in rows]
    for _ in range(4):
        rows = [r[-1] for r in model.forward([(c, [t[-1]]) for c, t in zip(caches, together)])]
        for t, r in zip(together, rows):
            t.append(int(r.argmax()))
    for p, t in zip(prompts, together):
        cache, alone = model.new_cache(64), []
        nxt = p
        for _ in range(5):
            alone.append(int(model.forward([(cache, nxt)])[0][-1].argmax()))
            nxt = [alone[-1]]
        assert alone == t
