"""The weight kernels against the CPU engine's dequantization: every type kept on the device, both launch shapes."""

import numpy as np
import pytest

from pantheon.engine.cuda import matvec
from pantheon.engine.cuda.ops import Activations, Ops
from pantheon.engine.cuda.upload import Uploader
from pantheon.engine.kernels.matmul import dequantize_rows
from tests.conftest import shared_path
from tests.pantheon.engine.cuda.sim import WIDE, backend, golden_weight

# (golden file, ggml type code): one tensor of each type the GPU keeps as it is
TYPES = [("llama-q4_0", 2), ("llama-q8_0", 8), ("llama-q4_k_m", 12), ("llama-q5_k_m", 13), ("llama-q6_k", 14),
         ("llama-f16", 1), ("llama-bf16", 30)]
ROWS = 6


def _weight(name, qtype, rows=ROWS):
    return golden_weight(name, qtype, rows)


@pytest.mark.parametrize("name,qtype", TYPES)
def test_tile_dequantization_matches_the_cpu_kernels(name, qtype):
    w = _weight(name, qtype)
    b = backend()
    mat = Uploader(b).matrix(w)
    tile = b.empty((ROWS, w.cols), np.float16)  # [rows, cols]
    b.launch(matvec.dequant_tile, 1, 1)(mat.words, mat.qtype, 0, tile)
    want = dequantize_rows(w, np.arange(ROWS)).astype(np.float16)  # [rows, cols]
    np.testing.assert_array_equal(b.to_host(tile), want)


def test_tile_dequantization_through_shared_memory_with_several_threads_and_blocks():
    """Blocks of 5 threads (a partial last round) over rows [1, 4): every value lands where it belongs."""
    w = _weight("llama-q4_k_m", 12)
    b = backend()
    mat = Uploader(b).matrix(w)
    tile = b.zeros((3, w.cols), np.float16)  # [3, cols]
    b.launch(matvec.dequant_tile, 2, 5)(mat.words, mat.qtype, 1, tile)
    want = dequantize_rows(w, np.arange(1, 4)).astype(np.float16)  # [3, cols]
    np.testing.assert_array_equal(b.to_host(tile), want)


@pytest.mark.parametrize("geometry", [None, WIDE], ids=["one-thread", "wide"])
@pytest.mark.parametrize("name,qtype", TYPES)
def test_matvec_on_raw_blocks_matches_dequantized_product(name, qtype, geometry):
    w = _weight(name, qtype)
    b = backend(geometry)
    x = np.random.default_rng(qtype).standard_normal((3, w.cols)).astype(np.float32)  # [3, cols]
    out = b.zeros((3, ROWS + 2))  # [3, 2 + rows]: written at column offset 2
    ops = Ops(b, int8=False)
    ops.matvec(Uploader(b).matrix(w), Activations(ops, b.upload(x)), out, 2)
    want = x @ dequantize_rows(w, np.arange(ROWS)).T  # [3, rows]
    got = b.to_host(out)
    np.testing.assert_allclose(got[:, 2:], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert not got[:, :2].any()


def test_embedding_rows_and_tile_product():
    w = _weight("llama-q4_k_m", 12, rows=8)
    b = backend(WIDE)
    ops, mat = Ops(b), Uploader(b).matrix(w)
    ids = np.array([5, 0, 5, 7], np.int32)
    out = b.empty((4, w.cols))  # [4, cols]
    ops.embed(mat, b.upload(ids), out)
    dq = dequantize_rows(w, np.arange(8))  # [8, cols]
    np.testing.assert_array_equal(b.to_host(out), dq[ids])
    x = np.random.default_rng(1).standard_normal((10, w.cols)).astype(np.float16)  # [10, cols]
    prod = b.zeros((10, 8))  # [10, 8]
    ops.tile_matmul(mat, b.upload(x), prod, b.empty((3 * w.cols + 5,), np.float16))  # tiles of 3 rows
    want = x.astype(np.float32) @ dq.astype(np.float16).astype(np.float32).T  # [10, 8]
    np.testing.assert_allclose(b.to_host(prod), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_expert_selected_matvec():
    from pantheon.engine.model_weights import bind_weights
    from pantheon.gguf.config import config_from_metadata
    from pantheon.gguf.file import open_gguf

    g = open_gguf(str(shared_path("golden", "qwen3moe-q8_0.gguf")))
    experts = bind_weights(g.tensors, config_from_metadata(g.metadata)).blocks[0].experts
    b = backend()
    mat = Uploader(b).experts(experts.up)
    sel = np.array([3, 0, 7, 3], np.int32)  # expert of each (token, slot) pair; two slots per token
    x = np.random.default_rng(2).standard_normal((2, mat.cols)).astype(np.float32)  # [2 tokens, cols]
    out = b.empty((4, mat.rows))  # [4 pairs, rows]
    ops = Ops(b, int8=False)
    ops.matvec_sel(mat, b.upload(sel), 2, Activations(ops, b.upload(x)), out)
    got = b.to_host(out)
    for m, e in enumerate(sel):
        want = dequantize_rows(experts.up[e], np.arange(mat.rows)) @ x[m // 2]  # [rows]
        np.testing.assert_allclose(got[m], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("geometry", [None, WIDE], ids=["one-thread", "wide"])
def test_unit_major_layout(geometry):
    """Value l of unit u of row i at [i, l, u]: the order the lanes of a warp read."""
    b = backend(geometry)
    x = np.arange(3 * 96, dtype=np.float32).reshape(3, 96)  # [3, 96]
    got = b.to_host(Ops(b).unit_major(b.upload(x)))  # [3, 32, 3]
    np.testing.assert_array_equal(got, x.reshape(3, 3, 32).transpose(0, 2, 1))
