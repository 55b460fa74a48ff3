"""K-quant kernels on Q8_K activations (both host families) against float64 products of gguf.quants.dequantize."""

import numpy as np
import pytest
from gguf.quants import dequantize

from pantheon.engine.kernels import q8dot, q8k
from pantheon.engine.kernels.avx2 import has_avx2
from pantheon.engine.kernels.jit import SERIAL_VALUES
from pantheon.engine.kernels.matmul import qmatmul
from pantheon.engine.kernels.vnni import has_int8_dots
from pantheon.engine.weights import Weight
from tests.pantheon.engine.kernels.blocks import K_QUANTS, random_blocks

pytestmark = pytest.mark.skipif(not has_avx2(), reason="host has no AVX2")

TYPES = K_QUANTS  # every K-quant runs on the Q8_K integer path
BATCHES = (1, 3, 4, 9, 20)


@pytest.fixture(autouse=True, params=["avx512", "avx2"])
def family(request, monkeypatch):
    """Each test on the kernels every host with VNNI or AVX2 takes (q8k_rows, q8k_lanes) and on the
    AVX2-only family they replaced (q8k_dot, q8k_tiles): both run on either host."""
    if request.param == "avx512" and not has_int8_dots():
        pytest.skip("host has neither AVX512-VNNI nor AVX2")
    if request.param == "avx2":
        monkeypatch.setattr(q8k, "_kernels_512", lambda qtype: None)
    return request.param


def reference_q8_k(x):
    """llama.cpp's quantize_row_q8_K_ref in numpy: int8 q [n, cols], float32 d [n, cols/256]."""
    blocks = x.reshape(len(x), -1, 256)  # [n, nb, 256]
    top = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]  # [n, nb] signed extreme
    safe = np.where(top == 0, np.float32(1.0), top)  # [n, nb]
    iscale = np.where(top == 0, np.float32(0.0), np.float32(-127.0) / safe).astype(np.float32)  # [n, nb]
    q = np.minimum(127, np.rint(blocks * iscale[..., None])).astype(np.int8)  # [n, nb, 256]
    d = np.where(top == 0, np.float32(0.0), np.float32(1.0) / np.where(top == 0, 1, iscale)).astype(np.float32)
    return q.reshape(x.shape), d


@pytest.mark.parametrize("copies", [1, SERIAL_VALUES // (5 * 512) + 1], ids=["serial", "threads"])
def test_activations_are_rounded_like_llama_cpp(copies):
    """5 rows take the serial quantizer, more than jit.SERIAL_VALUES values the thread pool's."""
    x = np.random.default_rng(0).standard_normal((5, 512)).astype(np.float32)  # [5, 512]
    x[2, :256] = 0.0  # an all-zero block: scale 0, quants 0
    x[3, 7] = -40.0  # a negative extreme: iscale = -127/max is then positive; the extreme maps to -127
    x = np.tile(x, (copies, 1))  # [5·copies, 512]
    acts = q8k.activations(x)
    q, d = reference_q8_k(x)
    np.testing.assert_array_equal(acts.xq.view(np.int8), q)
    np.testing.assert_array_equal(acts.xd, d)
    np.testing.assert_array_equal(acts.bs16, q.reshape(5 * copies, -1, 16).sum(-1, dtype=np.int32))
    assert acts.xq.view(np.int8)[3, 7] == -127 and acts.xd[3, 0] > 0


@pytest.mark.parametrize("first", [-5.0, 5.0])
def test_the_first_of_two_extremes_of_opposite_sign_sets_the_scale(first):
    """+m and -m in one block: llama.cpp keeps the first (a strictly larger |x| replaces its extreme),
    which decides the sign of iscale and so every quant's sign."""
    x = np.random.default_rng(2).uniform(-1.0, 1.0, (2, 256)).astype(np.float32)  # [2, 256]
    x[0, 3], x[0, 200] = first, -first
    x[1, 250] = np.float32(-first)  # the extreme in the last vector of the block
    acts = q8k.activations(x)
    q, d = reference_q8_k(x)
    np.testing.assert_array_equal(acts.xq.view(np.int8), q)
    np.testing.assert_array_equal(acts.xd, d)
    assert acts.xq.view(np.int8)[0, 3] == -127 and acts.xq.view(np.int8)[1, 250] == -127


def dequantized_acts(acts, cols):
    return (acts.xq.view(np.int8).astype(np.float64).reshape(acts.n, -1, 256) * acts.xd[..., None]).reshape(-1, cols)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n", BATCHES)
def test_product_matches_float64_on_the_same_int8_activations(qtype, n):
    rng = np.random.default_rng(int(qtype) * 10 + n)
    rows, cols = 37, 768
    raw = random_blocks(qtype, rows, cols, rng)
    x = rng.standard_normal((n, cols)).astype(np.float32)  # [n, cols]
    acts = q8k.activations(x)
    out = np.empty((n, rows), np.float32)  # [n, rows]
    q8k.product(qtype, raw, acts, out)
    w = dequantize(raw, qtype).reshape(rows, cols).astype(np.float64)  # [rows, cols]
    want = dequantized_acts(acts, cols) @ w.T  # [n, rows]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("qtype", TYPES)
def test_a_vector_gets_the_same_bits_in_any_batch(qtype):
    rng = np.random.default_rng(int(qtype))
    rows, cols = 37, 512  # q8k_lanes: one full 32-row task (Q4_K's direct unpack) and a ragged one
    raw = random_blocks(qtype, rows, cols, rng)
    top = max(q8k.TILES_FROM, q8k.LANES_FROM) + 1
    x = rng.standard_normal((top, cols)).astype(np.float32)  # [17, cols]
    alone = np.empty((len(x), rows), np.float32)  # [17, rows] each vector by itself
    for i in range(len(x)):
        q8k.product(qtype, raw, q8k.activations(x[i:i + 1]), alone[i:i + 1])
    # 9: 8 through a 4-vector kernel (the tiles or lanes where there is none), 1 alone; 17: 16 through
    # the tiles or lanes
    for n in (9, top):
        batched = np.empty((n, rows), np.float32)  # [n, rows]
        q8k.product(qtype, raw, q8k.activations(x[:n]), batched)
        np.testing.assert_array_equal(batched, alone[:n])


@pytest.mark.parametrize("qtype", TYPES)
def test_qmatmul_takes_the_integer_path_for_k_quants(qtype):
    """K-quants take q8k (activations rounded per 256, llama.cpp's Q8_K) wherever it runs; q8dot (per
    32) only on a VNNI host without it."""
    rng = np.random.default_rng(3)
    rows, cols = 16, 256
    raw = random_blocks(qtype, rows, cols, rng)
    x = rng.standard_normal((2, cols)).astype(np.float32)  # [2, cols]
    got = qmatmul([Weight("w", int(qtype), rows, cols, raw)], x)[0]  # [2, rows]
    if q8k.supports(qtype, cols):
        xs = dequantized_acts(q8k.activations(x), cols)  # [2, cols]
    else:
        acts = q8dot.Activations(x)
        xs = (acts.xq.view(np.int8).astype(np.float64).reshape(2, -1, 32) * acts.xd[..., None]).reshape(2, cols)
    want = xs @ dequantize(raw, qtype).reshape(rows, cols).astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
