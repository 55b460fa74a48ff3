"""The int8-activation kernels against a numpy reference: llama.cpp's Q8_1 rounding of the activations, the CPU
engine's dequantization of the weights, for every quantized type the GPU keeps and both launch shapes."""

import numpy as np
import pytest

from pantheon.engine.cuda.ops import Activations, Ops
from pantheon.engine.cuda.upload import Uploader
from pantheon.engine.kernels.matmul import dequantize_rows
from tests.conftest import shared_path
from tests.pantheon.engine.cuda.sim import WIDE, backend, golden_weight

TYPES = [("llama-q4_0", 2), ("llama-q8_0", 8), ("llama-q4_k_m", 12), ("llama-q5_k_m", 13), ("llama-q6_k", 14)]
ROWS = 6
GEOMETRIES = pytest.mark.parametrize("geometry", [None, WIDE], ids=["one-thread", "wide"])


def q8_reference(x):
    """(quants int [n, cols], scale per 32 [n, cols/32]): d = max|x| / 127, quants rounded half away from 0."""
    n, cols = x.shape
    units = x.astype(np.float64).reshape(n, cols // 32, 32)  # [n, units, 32]
    d = np.abs(units).max(axis=2) / 127  # [n, units]
    scaled = units / np.where(d > 0, d, 1)[..., None]  # [n, units, 32]
    q = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)  # [n, units, 32]
    return q.reshape(n, cols).astype(np.int64), d


def quantized_product(x, w, rows):
    """float64 [n, rows]: the dequantized weights times the activations as the int8 kernels see them."""
    q, d = q8_reference(x)
    xs = (q.reshape(len(x), -1, 32) * d[..., None]).reshape(x.shape)  # [n, cols]
    return xs @ dequantize_rows(w, np.arange(rows)).astype(np.float64).T  # [n, rows]


@GEOMETRIES
def test_quantize_units_packs_quants_unit_major_with_scales_and_half_sums(geometry):
    b = backend(geometry)
    x = np.random.default_rng(5).standard_normal((3, 96)).astype(np.float32) * 3  # [3, 96]
    x[1, 32:64] = 0  # an all-zero unit: scale 0, quants 0
    xq, xs = Ops(b).quantize_units(b.upload(x))
    words = b.to_host(xq)  # [3, 8, 3] int32
    got = words.view(np.uint8).reshape(3, 8, 3, 4).transpose(0, 2, 1, 3).reshape(3, 96).view(np.int8)  # [3, 96]
    q, d = q8_reference(x)
    np.testing.assert_array_equal(got, q)
    scales = b.to_host(xs)  # [3, 3, units]
    np.testing.assert_allclose(scales[:, 0], d, rtol=1e-6)
    halves = q.reshape(3, 3, 2, 16).sum(axis=3) * d[..., None]  # [3, units, 2]
    np.testing.assert_allclose(scales[:, 1:].transpose(0, 2, 1), halves, rtol=1e-6, atol=1e-6)


def int8_matvec(name, qtype, geometry, rows, n=3):
    """(kernel output [n, rows], x [n, cols], weight) for a golden tensor's first `rows` rows."""
    w = golden_weight(name, qtype, rows)
    b = backend(geometry)
    x = np.random.default_rng(qtype).standard_normal((n, w.cols)).astype(np.float32)  # [n, cols]
    out = b.zeros((n, rows + 2))  # [n, 2 + rows]: written at column offset 2
    ops = Ops(b)
    ops.matvec(Uploader(b).matrix(w), Activations(ops, b.upload(x)), out, 2)
    got = b.to_host(out)
    assert not got[:, :2].any()
    return got[:, 2:], x, w


@GEOMETRIES
@pytest.mark.parametrize("name,qtype", TYPES)
def test_int8_matvec_matches_the_quantized_product(name, qtype, geometry):
    got, x, w = int8_matvec(name, qtype, geometry, ROWS)
    want = quantized_product(x, w, ROWS)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    exact = x.astype(np.float64) @ dequantize_rows(w, np.arange(ROWS)).T  # [3, rows] float activations
    assert np.abs(got - exact).max() < 0.02 * np.abs(exact).max()  # what int8 activations cost


@pytest.mark.parametrize("rows", [1, 13])
def test_int8_matvec_row_pairs_cover_odd_counts_and_grid_strides(rows):
    """Two rows per thread: an odd last row, and more row pairs than blocks x rows per block (WIDE: 3 x 4)."""
    got, x, w = int8_matvec("llama-q4_0", 2, WIDE, rows, n=8)
    want = quantized_product(x, w, rows)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_float_weights_keep_the_float_kernels():
    """F16 rows are not requantized: with int8 on, the product is the float one (an int8 one would differ)."""
    w = golden_weight("llama-f16", 1, ROWS)
    b = backend()
    x = np.random.default_rng(3).standard_normal((2, w.cols)).astype(np.float32)  # [2, cols]
    out = b.zeros((2, ROWS))  # [2, rows]
    ops = Ops(b)
    ops.matvec(Uploader(b).matrix(w), Activations(ops, b.upload(x)), out)
    want = x @ dequantize_rows(w, np.arange(ROWS)).T  # [2, rows]
    np.testing.assert_allclose(b.to_host(out), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@GEOMETRIES
def test_int8_expert_selected_matvec(geometry):
    from pantheon.engine.model_weights import bind_weights
    from pantheon.gguf.config import config_from_metadata
    from pantheon.gguf.file import open_gguf

    g = open_gguf(str(shared_path("golden", "qwen3moe-q8_0.gguf")))
    experts = bind_weights(g.tensors, config_from_metadata(g.metadata)).blocks[0].experts
    b = backend(geometry)
    mat = Uploader(b).experts(experts.up)
    sel = np.array([3, 0, 7, 3], np.int32)  # expert of each (token, slot) pair; two slots per token
    x = np.random.default_rng(2).standard_normal((2, mat.cols)).astype(np.float32)  # [2 tokens, cols]
    out = b.empty((4, mat.rows))  # [4 pairs, rows]
    ops = Ops(b)
    ops.matvec_sel(mat, b.upload(sel), 2, Activations(ops, b.upload(x)), out)
    got = b.to_host(out)
    for m, e in enumerate(sel):
        want = quantized_product(x[m // 2: m // 2 + 1], experts.up[e], mat.rows)[0]  # [rows]
        np.testing.assert_allclose(got[m], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
