"""The load estimate against independent references (gguf's reader, real KV caches, measured scratch)
and the verdicts it leads to."""

import os
import struct
import tracemalloc

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType
from gguf import GGMLQuantizationType as T

from pantheon.gguf.config import config_from_metadata
from pantheon.errors import MissingKey, MissingTensor, UnsupportedArchitecture, UsageError
from pantheon.serve.fit import (DOES_NOT_FIT, FITS, FITS_TIGHT, HEADROOM_BYTES, REFUSED, estimate, fit,
                          verdict)
from pantheon.gguf.file import open_gguf
from pantheon.engine.kvcache import KVCache
from pantheon.serve.memory import MemInfo
from pantheon.engine.model import open_model
from tests.conftest import ROOT, shared_path
from tests.ggufcraft import rewrite
from tests.pantheon.gguf.craft import VT, gguf_bytes, gstr, kv, tinfo

GiB = 1 << 30
MiB = 1 << 20


def golden(name):
    return shared_path("golden", f"{name}.gguf")


def reader_bytes(path):
    return sum(int(t.n_bytes) for t in GGUFReader(str(path)).tensors)


def sparse_llama(path, dim, layers, heads, kv_heads, ff, vocab, ctx, qtype=T.Q4_0):
    """A llama-shaped GGUF whose tensors are holes in a sparse file: real sizes, no disk, no reads.
    Returns the tensor bytes, computed from ggml's block sizes."""
    u32 = lambda key, v: kv(key, VT.UINT32, struct.pack("<I", v))  # noqa: E731
    kvs = [kv("general.architecture", VT.STRING, gstr("llama")), u32("llama.embedding_length", dim),
           u32("llama.block_count", layers), u32("llama.attention.head_count", heads),
           u32("llama.attention.head_count_kv", kv_heads), u32("llama.feed_forward_length", ff),
           u32("llama.context_length", ctx), u32("llama.vocab_size", vocab)]
    hd = dim // heads
    shapes = {"token_embd.weight": (dim, vocab), "output_norm.weight": (dim,), "output.weight": (dim, vocab)}
    for i in range(layers):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (dim,), p + "ffn_norm.weight": (dim,),
                       p + "attn_q.weight": (dim, dim), p + "attn_k.weight": (dim, kv_heads * hd),
                       p + "attn_v.weight": (dim, kv_heads * hd), p + "attn_output.weight": (dim, dim),
                       p + "ffn_gate.weight": (dim, ff), p + "ffn_up.weight": (dim, ff),
                       p + "ffn_down.weight": (ff, dim)})
    infos, offset = [], 0
    for name, ne in shapes.items():
        q = T.F32 if len(ne) == 1 else qtype
        block, size = GGML_QUANT_SIZES[q]
        infos.append(tinfo(name, ne, q, offset))
        offset += -(-(int(np.prod(ne)) // block * size) // 32) * 32
    head = gguf_bytes(kvs, infos)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return sum(t.n_bytes for t in open_gguf(path).tensors.values())


# ---- the parts against references


@pytest.mark.parametrize("name", ["llama-q4_0", "llama-f16", "llama-tied-q8_0", "qwen3moe-q8_0", "phi3-q8_0"])
def test_weights_are_the_tensor_bytes_gguf_reads(name):
    path = golden(name)
    est = estimate(path)
    assert est.file_weights == reader_bytes(path)
    assert est.weights == est.file_weights


@pytest.mark.parametrize("name", ["llama-q4_0", "qwen3-q8_0", "mixtral-q8_0"])
def test_kv_is_what_full_caches_allocate(name):
    path = golden(name)
    cfg = config_from_metadata(open_gguf(path).metadata)
    cache = KVCache(cfg, 1000)
    cache.reserve(1000)
    est = estimate(path, ctx=1000, slots=3, sessions=5)
    assert est.kv_slots == 3 * cache.nbytes
    assert est.kv_sessions == 5 * cache.nbytes
    assert est.kv_per_token * 1000 == cache.nbytes


def test_ctx_is_clamped_to_the_training_context():
    path = golden("llama-q4_0")
    est = estimate(path, ctx=10**7, slots=1)
    assert est.ctx == config_from_metadata(open_gguf(path).metadata).n_ctx_train


def engine_step_peak(model, ctx, slots, chunk):
    """Bytes numpy allocates during one engine step: a prompt chunk plus one decode row per other slot."""
    caches = [model.new_cache(ctx) for _ in range(slots)]
    for c in caches:
        c.reserve(ctx // 2)
    model.forward([(c, [1] * (ctx // 4)) for c in caches])

    def step():
        return [(caches[0], list(np.arange(chunk) % 50 + 3))] + [(c, [5]) for c in caches[1:]]

    model.forward(step())  # a first step of this shape may compile kernels: not measured
    tracemalloc.start()
    try:
        model.forward(step())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", ["llama-q4_0", "llama-f16", "qwen3-q8_0", "qwen3moe-q8_0", "phi3-q8_0"])
def test_compute_bounds_a_measured_engine_step(name):
    path = golden(name)
    ctx, slots, chunk = 1024, 4, 256
    peak = engine_step_peak(open_model(path, threads=1), ctx, slots, chunk)
    est = estimate(path, ctx=ctx, slots=slots, chunk=chunk)
    assert peak <= est.compute < 50 * peak


def test_growth_term_bounds_kvcache_doubling():
    path = golden("llama-q4_0")
    cfg = config_from_metadata(open_gguf(path).metadata)
    ctx = 2048
    tracemalloc.start()  # before the cache exists, so freeing its first arrays is seen too
    try:
        cache = KVCache(cfg, ctx, initial=ctx // 2)
        cache.tokens.extend([1] * (ctx // 2))  # a full cache at half the context
        cache.reserve(1)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    est = estimate(path, ctx=ctx, slots=1)
    extra = peak - current  # both arrays alive while the old one is copied
    assert extra >= ctx // 2 * est.kv_per_token
    assert est.compute >= extra


# ---- verdicts


def test_small_model_fits_in_plenty_of_memory():
    v = fit(golden("llama-q4_0"), mem=MemInfo(64 * GiB, 48 * GiB, "host"), ctx=2048, slots=4)
    assert v.kind == FITS
    n = v.numbers
    assert n["total"] == n["weights"] + n["kv"] + n["compute"] + n["runtime"] + n["headroom"]
    assert n["available"] == 48 * GiB


def test_same_model_does_not_fit_in_tiny_memory():
    v = fit(golden("llama-q4_0"), mem=MemInfo(64 * MiB, 32 * MiB, "cgroup2:/x"), ctx=2048, slots=4)
    assert v.kind == DOES_NOT_FIT and "short by" in v.reason


def test_fits_tight_when_only_the_headroom_is_eaten():
    est = estimate(golden("llama-q4_0"), ctx=2048, slots=4)
    assert verdict(est, est.total).kind == FITS
    v = verdict(est, est.need + est.headroom // 2)
    assert v.kind == FITS_TIGHT and "headroom" in v.reason
    assert verdict(est, est.need - 1).kind == DOES_NOT_FIT


def test_fits_tight_when_the_load_would_push_pressure_to_tight():
    est = estimate(golden("llama-q4_0"), ctx=2048, slots=4)
    total = 100 * est.total
    assert verdict(est, est.total + total // 2, total).kind == FITS
    v = verdict(est, est.need + total // 10, total)  # leaves 10 % free: TIGHT
    assert v.kind == FITS_TIGHT and "TIGHT" in v.reason


def test_seven_b_shaped_f16_does_not_fit_in_eight_gib(tmp_path):
    path = tmp_path / "llama7b-f16.gguf"
    tensor_bytes = sparse_llama(path, 4096, 32, 32, 32, 11008, 32000, 4096, T.F16)
    dims = 2 * 32000 * 4096 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert tensor_bytes == 2 * dims + 4 * 4096 * 65
    v = fit(path, mem=MemInfo(16 * GiB, 8 * GiB, "host"), ctx=4096, slots=4)
    assert v.kind == DOES_NOT_FIT
    assert v.numbers["weights"] == tensor_bytes


def test_huge_context_and_slots_do_not_fit(tmp_path):
    path = rewrite(golden("llama-f32"), tmp_path / "long.gguf",
                   set_keys={"llama.context_length": (1 << 20, GGUFValueType.UINT32)})
    est = estimate(path, ctx=1 << 20, slots=8)
    assert est.ctx == 1 << 20 and est.kv_slots == 8 * (1 << 20) * est.kv_per_token
    assert est.kv_slots == 2 * GiB  # 256 bytes a position (float16 keys and values)
    assert verdict(est, 2 * GiB).kind == DOES_NOT_FIT


def test_unknown_architecture_is_refused_with_its_name(tmp_path):
    path = rewrite(golden("llama-f32"), tmp_path / "mamba.gguf",
                   set_keys={"general.architecture": ("mamba", GGUFValueType.STRING)})
    with pytest.raises(UnsupportedArchitecture, match="mamba"):
        estimate(path)
    v = fit(path, mem=MemInfo(64 * GiB, 48 * GiB, "host"))
    assert v.kind == REFUSED and "mamba" in v.reason and "UnsupportedArchitecture" in v.reason


def test_missing_key_or_tensor_is_refused_naming_it(tmp_path):
    no_key = rewrite(golden("llama-f32"), tmp_path / "nokey.gguf", drop_keys=("llama.block_count",))
    with pytest.raises(MissingKey, match="llama.block_count"):
        estimate(no_key)
    assert "llama.block_count" in fit(no_key, mem=MemInfo(GiB, GiB, "host")).reason
    no_tensor = rewrite(golden("llama-f32"), tmp_path / "notensor.gguf", drop_tensors=("blk.1.ffn_down.weight",))
    v = fit(no_tensor, mem=MemInfo(64 * GiB, 48 * GiB, "host"))
    assert v.kind == REFUSED and "blk.1.ffn_down.weight" in v.reason
    with pytest.raises(MissingTensor):
        estimate(no_tensor)


def test_missing_file_is_refused():
    v = fit("/nonexistent/model.gguf", mem=MemInfo(GiB, GiB, "host"))
    assert v.kind == REFUSED and "FileNotFoundError" in v.reason


def test_cpu_replicas_and_shared_files_count_weights_once(tmp_path):
    path = golden("llama-q4_0")
    one = estimate(path, dies=("cpu0",))
    two = estimate(path, dies=("cpu0", "cpu1"))
    assert two.weights == one.weights == one.file_weights
    assert two.kv == 2 * one.kv and two.compute == 2 * one.compute
    link = tmp_path / "alias.gguf"
    os.symlink(path, link)
    shared = estimate(path, dies=("cpu0", "cpu1"), shared_files=[str(link)])
    assert shared.weights == 0 and shared.kv == two.kv


def test_quantize_counts_the_q8_0_copies_open_model_makes():
    path = golden("llama-f16")
    model = open_model(path, threads=1, quantize=True)
    seen, made = set(), 0
    for blk in model.weights.blocks:
        for w in (blk.wq, blk.wk, blk.wv, blk.wo, blk.gate, blk.up, blk.down):
            made += w.raw.nbytes if w.qtype == T.Q8_0 and id(w) not in seen else 0
            seen.add(id(w))
    for w in (model.weights.token_embd, model.weights.output):
        made += w.raw.nbytes if id(w) not in seen else 0
        seen.add(id(w))
    plain = estimate(path, dies=("cpu0", "cpu1"))
    quant = estimate(path, dies=("cpu0", "cpu1"), quantize=True)
    norms = sum(t.n_bytes for t in open_gguf(path).tensors.values() if len(t.shape) == 1)
    assert quant.weights == norms + 2 * made
    assert plain.weights == plain.file_weights


def test_cuda_die_needs_its_free_memory_known():
    est = estimate(golden("llama-q4_0"), dies=("cuda0",))
    cpu = estimate(golden("llama-q4_0"), dies=("cpu0",))
    g = open_gguf(golden("llama-q4_0"))
    from pantheon.engine.cuda.sizing import gpu_vram

    assert est.vram["cuda0"] == gpu_vram(g.tensors, config_from_metadata(g.metadata), est.ctx, est.slots,
                                         est.sessions, 1)
    split = estimate(golden("llama-q4_0"), dies=("cuda0", "cuda1"))  # one --model on two GPUs: a share each
    assert split.vram["cuda0"] == split.vram["cuda1"] < est.vram["cuda0"]
    assert (est.weights, est.kv, est.compute, est.runtime) == (0, 0, 0, cpu.runtime)
    assert verdict(est, 64 * GiB).kind == REFUSED
    assert verdict(est, 64 * GiB, vram_available={"cuda0": 80 * GiB}).kind == FITS
    v = verdict(est, 64 * GiB, vram_available={"cuda0": 10 * MiB})
    assert v.kind == DOES_NOT_FIT and "cuda0" in v.reason


@pytest.mark.parametrize("args", [{"slots": 0}, {"ctx": -1}, {"sessions": -2}, {"dies": ("gpu0",)}, {"dies": ()}])
def test_bad_arguments_are_usage_errors(args):
    with pytest.raises(UsageError):
        estimate(golden("llama-q4_0"), **args)


def test_tinyllama_shaped_worked_example(tmp_path):
    """The numbers docs/memory.md walks through."""
    path = tmp_path / "tinyllama-q4_0.gguf"
    tensor_bytes = sparse_llama(path, 2048, 22, 32, 4, 5632, 32000, 2048)
    block, size = GGML_QUANT_SIZES[T.Q4_0]
    per_layer = 2048 * (2 * 2048 + 2 * 256 + 3 * 5632) // block * size + 2 * 2048 * 4
    assert tensor_bytes == 2 * 32000 * 2048 // block * size + 22 * per_layer + 2048 * 4
    est = estimate(path, ctx=2048, slots=4, sessions=8)
    assert est.kv_per_token == 2 * 22 * 4 * 64 * 2 == 22528  # float16 keys and values
    assert est.kv_slots == 4 * 2048 * 22528 and est.kv_sessions == 8 * 2048 * 22528
    activations = 4 * (256 + 4) * (2048 + 2048 + 5632) * 4
    assert est.compute == activations + 4 * 32000 * 4 + (64 << 20) + 1024 * 22528
    assert est.headroom == int(0.1 * est.need) + HEADROOM_BYTES


def test_the_estimate_uses_the_engines_own_constants():
    from pantheon.serve import fit as fit_module
    from pantheon.engine import quantize
    from pantheon.engine.kernels import matmul
    assert fit_module.TILE_BYTES == matmul.TILE_BYTES
    assert fit_module.FLOAT_TYPES is quantize.FLOAT_TYPES and fit_module.Q8_0_BLOCK == quantize.BLOCK


def test_the_supervisor_can_import_it_without_numba():
    import subprocess
    import sys
    code = "import sys, pantheon.serve.fit, pantheon.serve.memory; sys.exit('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
