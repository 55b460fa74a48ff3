"""K-quant kernels against gguf.quants.dequantize: random blocks of odd shapes, then real tensors."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from pantheon.engine.kernels import kquants
from pantheon.engine.kernels.contract import read_only
from tests.conftest import shared_path
from tests.pantheon.engine.kernels.blocks import FP16_FIELDS, K_QUANTS, random_blocks

SHAPES = [(rows, cols) for rows in (1, 7, 33, 100) for cols in (256, 768, 2048)]
BATCHES = (1, 2, 3, 4, 7)
GOLDEN = ("llama-q4_k_m", "llama-q2_k", "llama-q3_k_m", "llama-q5_k_m", "llama-q6_k")


def check_gemv(k, raw, w, n, rng):
    """gemv(raw, x) against float64 x @ w.T, error bounded relative to Σ|w||x| of each output."""
    x = rng.standard_normal((n, w.shape[1])).astype(np.float32)  # [n, cols]
    out = np.full((n, w.shape[0]), np.nan, np.float32)  # [n, rows]
    k.gemv(raw, x, out)
    want = x.astype(np.float64) @ w.astype(np.float64).T  # [n, rows]
    bound = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T  # [n, rows]
    err = np.abs(out - want)  # [n, rows]
    assert np.all(err <= 1e-5 * bound + 1e-30), f"n={n} worst relative error {np.max(err / (bound + 1e-30))}"


def check_dequant(k, raw, w):
    out = np.full(w.shape, np.nan, np.float32)  # [rows, cols]
    k.dequant(raw, out)
    bad = np.argwhere(out != w)  # [k, 2]
    assert bad.size == 0, f"{len(bad)} values differ, first at {bad[0]}: {out[tuple(bad[0])]} != {w[tuple(bad[0])]}"


def test_every_k_type_is_exported():
    assert set(kquants.KERNELS) == {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K}


@pytest.mark.parametrize("qtype", K_QUANTS, ids=lambda t: t.name)
def test_random_blocks(qtype):
    k = kquants.KERNELS[qtype]
    rng = np.random.default_rng(int(qtype))
    for rows, cols in SHAPES:
        raw = random_blocks(qtype, rows, cols, rng)  # [rows, row_bytes]
        w = dequantize(raw, qtype).reshape(rows, cols)  # [rows, cols]
        check_dequant(k, raw, w)
        for n in BATCHES:
            check_gemv(k, raw, w, n, rng)


@pytest.mark.parametrize("qtype", K_QUANTS, ids=lambda t: t.name)
def test_extreme_fields(qtype):
    """All-0x00 and all-0xFF quant bytes reach the ends of every field (q, scales, mins, high bits)."""
    k = kquants.KERNELS[qtype]
    rng = np.random.default_rng(7)
    for fill in (0x00, 0xFF):
        keep = random_blocks(qtype, 5, 512, rng)  # [5, row_bytes]
        raw = np.full_like(keep, fill)  # [5, row_bytes]
        for o in FP16_FIELDS[qtype]:
            blocks = raw.reshape(5, 2, -1)  # [5, 2, block_bytes]
            blocks[:, :, o:o + 2] = keep.reshape(5, 2, -1)[:, :, o:o + 2]
        raw = read_only(raw)  # [5, row_bytes]
        w = dequantize(raw, qtype).reshape(5, 512)  # [5, 512]
        check_dequant(k, raw, w)
        check_gemv(k, raw, w, 2, rng)


def test_gemv_reads_the_whole_row():
    """A change in the last block of one row moves that row's output and no other."""
    qtype = T.Q4_K
    k = kquants.KERNELS[qtype]
    rng = np.random.default_rng(3)
    raw = random_blocks(qtype, 4, 768, rng).copy()  # [4, row_bytes], writable: one byte changes below
    x = rng.standard_normal((1, 768)).astype(np.float32)  # [1, 768]
    before = np.empty((1, 4), np.float32)  # [1, 4]
    after = np.empty((1, 4), np.float32)  # [1, 4]
    k.gemv(read_only(raw), x, before)
    raw[2, -1] ^= 0xFF
    k.gemv(read_only(raw), x, after)
    assert after[0, 2] != before[0, 2]
    assert np.array_equal(np.delete(after, 2, axis=1), np.delete(before, 2, axis=1))


def _k_tensors(path):
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type in kquants.KERNELS:
            yield t


@pytest.mark.parametrize("model", GOLDEN)
def test_real_tensors(model):
    path = shared_path("golden", f"{model}.gguf")
    rng = np.random.default_rng(11)
    seen = set()
    for t in _k_tensors(path):
        seen.add(t.tensor_type)
        raw = np.ascontiguousarray(t.data[:96])  # [rows, row_bytes] uint8 view of the file
        cols = int(t.shape[0])
        w = dequantize(raw, t.tensor_type).reshape(raw.shape[0], cols)  # [rows, cols]
        k = kquants.KERNELS[t.tensor_type]
        check_dequant(k, raw, w)
        check_gemv(k, raw, w, 1, rng)
        check_gemv(k, raw, w, 3, rng)
    assert seen, f"{model} holds no K-quant tensor"
