"""Causal grouped-query attention against a float64 softmax, one sequence alone and several in a step."""

import numpy as np

from pantheon.engine.attention import StepLayout, attend, attend_step

H, KV, HD = 4, 2, 16


def _reference(q, k, v, p0):
    """float64 causal GQA: q [s, H, hd] at positions p0.. over k, v [KV, L, hd], rounded to float16 as the
    caches hold them -> [s, H*hd]."""
    s, out = q.shape[0], np.zeros((q.shape[0], H, HD))  # [s, H, hd]
    k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)  # [KV, L, hd]
    for i in range(s):
        for h in range(H):
            kk, vv = k[h // (H // KV), :p0 + i + 1].astype(np.float64), v[h // (H // KV), :p0 + i + 1]  # [len, hd]
            w = np.exp(kk @ q[i, h] / np.sqrt(HD) - (kk @ q[i, h] / np.sqrt(HD)).max())  # [len]
            out[i, h] = w @ vv / w.sum()
    return out.reshape(s, H * HD)


def test_one_sequence_matches_float64_at_an_offset():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((5, H, HD)).astype(np.float32) * 2  # [5, H, hd]
    k, v = (rng.standard_normal((KV, 12, HD)).astype(np.float32) for _ in range(2))  # [KV, 12, hd]
    np.testing.assert_allclose(attend(q, k, v, 7), _reference(q, k, v, 7), rtol=1e-5, atol=1e-6)


def test_a_step_of_several_sequences_stores_their_keys_and_gives_each_the_bits_it_gets_alone():
    rng = np.random.default_rng(1)
    caches = [_cache(rng, n) for n in (3, 0, 9)]
    new = [2, 1, 1]  # a short prefill beside two decodes
    q = rng.standard_normal((sum(new), H, HD)).astype(np.float32)  # [4, H, hd]
    k, v = (rng.standard_normal((sum(new), KV, HD)).astype(np.float32) for _ in range(2))  # [4, KV, hd]
    together = attend_step(StepLayout(caches, new), 1, q, k, v)  # [4, H*hd]
    rows = np.cumsum([0] + new)
    for s, c in enumerate(caches):
        a, b = rows[s], rows[s + 1]
        np.testing.assert_array_equal(c.k[1, :, len(c):len(c) + new[s]], k[a:b].transpose(1, 0, 2).astype(np.float16))
        alone = attend_step(StepLayout([c], [new[s]]), 1, q[a:b], k[a:b], v[a:b])
        np.testing.assert_array_equal(alone, together[a:b])
        want = _reference(q[a:b], c.k[1, :, :len(c) + new[s]], c.v[1, :, :len(c) + new[s]], len(c))
        np.testing.assert_allclose(together[a:b], want, rtol=1e-5, atol=1e-6)


class _Cache:
    """The two fields attention reads of a KVCache: k, v float16 [n_layer, KV, capacity, hd], and a length."""

    def __init__(self, k, v, n):
        self.k, self.v, self.n = k, v, n

    def __len__(self):
        return self.n


def _cache(rng, n):
    k, v = (rng.standard_normal((2, KV, 16, HD)).astype(np.float16) for _ in range(2))  # [layers, KV, 16, hd]
    return _Cache(k, v, n)


def test_a_lone_sequences_lists_are_reused_until_its_cache_grows_and_go_with_it():
    import gc
    from types import SimpleNamespace

    from pantheon.engine import attention
    from pantheon.engine.kvcache import KVCache

    cache = KVCache(SimpleNamespace(n_layer=2, n_head_kv=KV, head_dim=HD), 64, initial=4)
    first = StepLayout([cache], [1])
    assert StepLayout([cache], [1]).ks is first.ks  # a decode stream's next step: no new typed list
    cache.tokens = [0] * 4
    cache.reserve(1)  # grows: new arrays, so new lists over them
    grown = StepLayout([cache], [1])
    assert grown.ks is not first.ks and np.shares_memory(grown.ks[0], cache.k)
    assert np.shares_memory(grown.vs[0], cache.v)
    del cache, first, grown
    gc.collect()
    assert len(attention._SOLO) == 0  # the weak table keeps no finished sequence's arrays
