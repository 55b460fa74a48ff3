"""VNNI int8-activation kernels against float64 products of gguf.quants.dequantize and the same int8 activations."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from pantheon.engine.kernels import q8dot
from pantheon.engine.kernels.jit import SERIAL_VALUES
from pantheon.engine.kernels.matmul import matmul, qmatmul
from pantheon.engine.kernels.vnni import has_int8_dots
from pantheon.engine.weights import Weight
from tests.pantheon.engine.kernels.blocks import random_blocks

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="host has neither AVX512-VNNI nor AVX2")

TYPES = (T.Q4_0, T.Q8_0)
BATCHES = (1, 3, 4, 9, 21)


def reference_quantize(x):
    """Q8_0-style rounding of x [n, cols]: int8 q [n, cols] and float32 scale d [n, cols/32], x ~ q·d."""
    blocks = x.reshape(len(x), -1, 32)  # [n, nb, 32]
    d = (np.abs(blocks).max(-1) / np.float32(127.0)).astype(np.float32)  # [n, nb]
    inv = np.where(d > 0, np.float32(1.0) / np.where(d > 0, d, 1), 0).astype(np.float32)  # [n, nb]
    q = np.rint(blocks * inv[..., None]).astype(np.int8)  # [n, nb, 32]
    return q.reshape(x.shape), d


@pytest.mark.parametrize("copies", [1, SERIAL_VALUES // (5 * 256) + 1], ids=["serial", "threads"])
def test_activations_are_rounded_like_llama_cpp(copies):
    """5 rows take the serial quantizer, more than jit.SERIAL_VALUES values the thread pool's."""
    x = np.random.default_rng(0).standard_normal((5, 256)).astype(np.float32)  # [5, 256]
    x[2, :32] = 0.0  # an all-zero block: scale 0, quants 0
    x[3, 32:64] = np.arange(-15.5, 16.5, dtype=np.float32)  # ties: x·inv = k + 0.5
    x[3, 63] = np.float32(127.0)  # the block's scale is exactly 1, so each tie rounds half to even
    x = np.tile(x, (copies, 1))  # [5·copies, 256]
    acts = q8dot.Activations(x)
    q, d = reference_quantize(x)
    np.testing.assert_array_equal(acts.xq.view(np.int8), q)
    np.testing.assert_array_equal(acts.xd, d)
    np.testing.assert_array_equal(acts.xsum, q.reshape(5 * copies, -1, 32).sum(-1, dtype=np.int32))


def test_the_scale_comes_from_the_largest_magnitude_in_any_lane():
    """Row p's block 0 has its largest |x| at position p (negative on odd rows): the 16-lane max reduction
    (a shuffle tree since it may assume no NaN) must find it in either half and every lane."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-1.0, 1.0, (32, 64)).astype(np.float32)  # [32, 64]
    for p in range(32):
        x[p, p] = np.float32(3.0 if p % 2 == 0 else -3.0) + np.float32(p) / 64
    acts = q8dot.Activations(x)
    q, d = reference_quantize(x)
    np.testing.assert_array_equal(acts.xd, d)
    np.testing.assert_array_equal(acts.xq.view(np.int8), q)
    np.testing.assert_array_equal(np.abs(q[np.arange(32), np.arange(32)]), 127)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n", BATCHES)
def test_product_matches_float64_on_the_same_int8_activations(qtype, n):
    rng = np.random.default_rng(int(qtype) * 10 + n)
    rows, cols = 37, 512
    raw = random_blocks(qtype, rows, cols, rng)
    x = rng.standard_normal((n, cols)).astype(np.float32)  # [n, cols]
    q, d = reference_quantize(x)
    xr = (q.reshape(n, -1, 32) * d[..., None].astype(np.float64)).reshape(n, cols)  # [n, cols] float64
    w = dequantize(raw, qtype).astype(np.float64)  # [rows, cols]
    out = np.full((n, rows), np.nan, np.float32)  # [n, rows]
    q8dot.product(qtype, raw, q8dot.Activations(x), out)
    bound = np.abs(xr) @ np.abs(w).T  # [n, rows]
    err = np.abs(out - xr @ w.T)  # [n, rows]
    assert np.all(err <= 2e-5 * bound), f"worst relative error {np.max(err / bound)}"


@pytest.mark.parametrize("qtype", TYPES)
def test_every_batch_size_gives_the_same_bits(qtype):
    rng = np.random.default_rng(int(qtype))
    raw = random_blocks(qtype, 21, 256, rng)
    n = 4 * q8dot.TILES_FROM + 3  # through the interleaving kernel: 4-vector passes and single vectors
    x = rng.standard_normal((n, 256)).astype(np.float32)  # [n, 256]
    whole = np.empty((n, 21), np.float32)  # [n, 21]
    q8dot.product(qtype, raw, q8dot.Activations(x), whole)
    for i in range(n):
        one = np.empty((1, 21), np.float32)  # [1, 21]
        q8dot.product(qtype, raw, q8dot.Activations(x[i:i + 1]), one)
        np.testing.assert_array_equal(one[0], whole[i])


def test_qmatmul_serves_each_weight_and_falls_back_to_exact_floats():
    rng = np.random.default_rng(3)
    q4 = Weight("a", int(T.Q4_0), 16, 256, random_blocks(T.Q4_0, 16, 256, rng))
    f32 = Weight("b", int(T.F32), 8, 256, rng.standard_normal((8, 256)).astype(np.float32).view(np.uint8))
    x = rng.standard_normal((2, 256)).astype(np.float32)  # [2, 256]
    a, b = qmatmul([q4, f32], x)
    np.testing.assert_array_equal(b, matmul(f32, x))
    want = x.astype(np.float64) @ dequantize(q4.raw, T.Q4_0).astype(np.float64).T  # [2, 16]
    bound = np.abs(x) @ np.abs(dequantize(q4.raw, T.Q4_0)).T  # [2, 16]
    assert np.all(np.abs(a - want) <= 2e-2 * bound)
