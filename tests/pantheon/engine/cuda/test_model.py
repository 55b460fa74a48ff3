"""The GPU model's own parts: layer splitting, the KV slot pool and its caches, a two-stage split."""

import numpy as np
import pytest

from pantheon.engine.cuda.kvpool import DeviceCache, SlotPool
from pantheon.engine.cuda.model import GpuModel, split_layers
from pantheon.errors import ContextOverflow, EngineError
from tests.conftest import shared_path
from tests.pantheon.engine.cuda.sim import need_devices


@pytest.mark.parametrize("n,shares,want", [
    (32, [1], [(0, 32)]), (32, [1, 1], [(0, 16), (16, 32)]), (32, [3, 1], [(0, 24), (24, 32)]),
    (2, [1, 1000], [(0, 1), (1, 2)]), (3, [1, 1, 1], [(0, 1), (1, 2), (2, 3)])])
def test_layers_split_in_proportion_and_no_stage_is_empty(n, shares, want):
    assert split_layers(n, shares) == want


def test_pool_slots_come_back_when_a_cache_is_dropped():
    pool = SlotPool(2, 8)
    a, b = DeviceCache(pool, 8), DeviceCache(pool, 100)
    assert {a.slot, b.slot} == {0, 1} and b.n_ctx == 8
    with pytest.raises(EngineError):
        DeviceCache(pool, 8)
    slot = a.slot
    del a
    assert DeviceCache(pool, 8).slot == slot


def test_cache_prefix_reuse_and_context_limit():
    c = DeviceCache(SlotPool(1, 4), 4)
    c.tokens.extend([1, 2, 3])
    assert c.common_prefix([1, 2, 9, 9]) == 2
    c.truncate(2)
    assert len(c) == 2
    c.reserve(2)
    with pytest.raises(ContextOverflow):
        c.reserve(3)


def test_a_model_split_over_two_devices_computes_what_one_device_does():
    """Two stages (two ordinals; in the simulator the same CPU) give the same logits as one stage."""
    need_devices(2)
    from pantheon.engine.cuda.backend import open_backend
    from pantheon.engine.model_weights import bind_weights
    from pantheon.gguf.config import config_from_metadata
    from pantheon.gguf.file import open_gguf

    g = open_gguf(str(shared_path("golden", "llama-f32.gguf")))
    cfg = config_from_metadata(g.metadata)
    weights = bind_weights(g.tensors, cfg)
    one = GpuModel.upload(g, cfg, weights, [open_backend(0)])
    two = GpuModel.upload(g, cfg, weights, [open_backend(0), open_backend(1)])
    assert two.layer_ranges == [(0, 1), (1, 2)]
    assert any("F32 converted to F16" in line for line in one.load_log)
    out = []
    for m in (one, two):
        m.allocate(8, 1)
        out.append(m.forward([(m.new_cache(), [1, 213, 540])])[0])
    np.testing.assert_array_equal(out[0], out[1])


def test_fit_sizing_covers_what_the_engine_allocates():
    """gpu_vram (what the fit estimate charges a CUDA die) against the bytes a loaded model holds."""
    from pantheon.engine.cuda.model import open_gpu_model
    from pantheon.engine.cuda.sizing import device_weight_bytes, gpu_vram
    from pantheon.engine.cuda.kvpool import pool_bytes

    model = open_gpu_model(str(shared_path("golden", "llama-q4_k_m.gguf")), [0])
    model.allocate(64, 3)
    held = model.device_bytes()[0]
    weights = device_weight_bytes(model.gguf.tensors)
    assert weights <= held - pool_bytes(model.config, 3, 64) <= weights + 8 * (1 << 20)  # + tile scratch
    assert held <= gpu_vram(model.gguf.tensors, model.config, 64, 2, 0, 1)
    model.close()
    assert model.stages[0].kcache is None and model.embd is None


def test_a_prefix_copied_slot_to_slot_computes_what_a_fresh_slot_does():
    """The prefix cache and n > 1 copy KV between pool slots: the copy must serve exactly."""
    from pantheon.engine.cuda.backend import open_backend
    from pantheon.engine.model_weights import bind_weights
    from pantheon.gguf.config import config_from_metadata
    from pantheon.gguf.file import open_gguf

    g = open_gguf(str(shared_path("golden", "llama-f32.gguf")))
    cfg = config_from_metadata(g.metadata)
    m = GpuModel.upload(g, cfg, bind_weights(g.tensors, cfg), [open_backend(0)])
    m.allocate(8, 3)
    src, fresh, copy = m.new_cache(), m.new_cache(), m.new_cache()
    for cache in (src, fresh):
        m.forward([(cache, [1, 213, 540])])
    m.forward([(src, [77])])  # src moves on: only its first three positions are shared
    copy.copy_from(src, 3)
    assert copy.tokens == [1, 213, 540] and copy.slot != src.slot
    want = m.forward([(fresh, [99])])[0]
    got = m.forward([(copy, [99])])[0]
    np.testing.assert_array_equal(got, want)


def test_hidden_and_every_row_segments_match_the_cpu_engine():
    """forward(hidden=, every=): the normed hidden states an embedding pools and every row's logits (prompt
    logprobs), from the GPU path, against the CPU model."""
    import pantheon
    from pantheon.engine.cuda.model import open_gpu_model

    path = str(shared_path("golden", "llama-f32.gguf"))
    cpu = pantheon.open_model(path, threads=1)
    gpu = open_gpu_model(path, [0])
    gpu.allocate(8, 2)
    a, b = [1, 213, 540, 17], [1, 99]
    want_h = cpu.forward([(cpu.new_cache(8), a)], hidden=[0])[0]  # [4, dim]
    want_l = cpu.logits(b)  # [2, n_vocab]
    got_l, got_h = gpu.forward([(gpu.new_cache(), b), (gpu.new_cache(), a)], hidden=[1], every=[0])
    assert got_h.shape == want_h.shape and got_l.shape == want_l.shape
    np.testing.assert_allclose(got_h, want_h, atol=1e-2)  # F16 weights on the device: ~2e-3 apart
    np.testing.assert_allclose(got_l, want_l, atol=1e-1)  # logits up to ~50: ~2e-2 apart
    gpu.close()


def test_a_rerank_on_the_gpu_engine_scores_what_the_cpu_engine_does(tmp_path):
    """The head runs on the host over the GPU's pooled row (a llama reranker: the first row, no softmax)."""
    import pantheon
    from pantheon.engine.cuda.model import open_gpu_model
    from pantheon.engine.scheduler import EmbeddingEvent, Engine, EngineConfig, Request
    from tests.rerankers import make_reranker

    path = str(make_reranker(shared_path("golden", "llama-f32.gguf"), tmp_path / "r.gguf", [5, 9], scale=1 / 16))
    gpu = open_gpu_model(path, [0])
    gpu.allocate(16, 2)
    got = []
    for model in (pantheon.open_model(path, threads=1), gpu):
        engine = Engine(model, EngineConfig(n_ctx=16))
        engine.add(Request(1, (1, 213, 540, 17), max_tokens=0, embed="rank"))
        events = []
        while engine.has_work:
            events += engine.step()
        got.append(next(e.vector for e in events if isinstance(e, EmbeddingEvent)))  # [2]
    np.testing.assert_allclose(got[1], got[0], atol=1e-2)
    gpu.close()
