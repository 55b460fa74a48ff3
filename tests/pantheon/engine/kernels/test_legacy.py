"""The legacy-type kernels against gguf.quants.dequantize followed by a float64 matmul."""

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

from pantheon.engine.kernels import legacy
from pantheon.engine.kernels.contract import read_only

TYPES = (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1)
ROWS = (1, 7, 33, 100)
COLS = (32, 96, 4096)


def random_raw(qtype, rows, cols, rng):
    """uint8 [rows, row_bytes], read-only as a model's weights are: random quants, every fp16 scale and min a
    sane finite value."""
    return read_only(_random_raw(qtype, rows, cols, rng))


def _random_raw(qtype, rows, cols, rng):
    if qtype in (T.F32, T.F16, T.BF16):
        w = rng.standard_normal((rows, cols), dtype=np.float32)  # [rows, cols]
        if qtype == T.F16:
            return w.astype(np.float16).view(np.uint8)
        if qtype == T.BF16:
            return (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        return w.view(np.uint8)
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // block_elems, block_bytes), dtype=np.uint8)  # [rows, nb, bb]
    nscales = 2 if qtype in (T.Q4_1, T.Q5_1) else 1
    scales = rng.uniform(-0.1, 0.1, (rows, cols // block_elems, nscales)).astype(np.float16)  # [rows, nb, k]
    raw[:, :, : 2 * nscales] = scales.view(np.uint8)
    return raw.reshape(rows, -1)


def reference(qtype, raw, cols):
    """float64 [rows, cols]: gguf-py's dequantization, the oracle."""
    return np.asarray(dequantize(raw, qtype), dtype=np.float64).reshape(raw.shape[0], cols)  # [rows, cols]


def assert_products_close(got, w, x):
    """got [n, rows] against x @ w.T in float64, within a few float32 ulps of Σ|w·x|."""
    want = x.astype(np.float64) @ w.T  # [n, rows]
    scale = np.abs(x).astype(np.float64) @ np.abs(w).T  # [n, rows]
    bad = np.abs(got - want) > 2e-6 * scale + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong; worst {np.abs(got - want).max()}"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", COLS)
def test_dequant_is_exact(qtype, rows, cols):
    rng = np.random.default_rng(rows * 7919 + cols)
    raw = random_raw(qtype, rows, cols, rng)
    out = np.full((rows, cols), np.nan, np.float32)  # [rows, cols]
    legacy.KERNELS[qtype].dequant(raw, out)
    np.testing.assert_array_equal(out, reference(qtype, raw, cols).astype(np.float32))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("n", (1, 2, 3, 4))
def test_gemv_matches_reference(qtype, rows, cols, n):
    rng = np.random.default_rng(rows * 31 + cols * 7 + n)
    raw = random_raw(qtype, rows, cols, rng)
    x = rng.standard_normal((n, cols), dtype=np.float32)  # [n, cols]
    out = np.full((n, rows), np.nan, np.float32)  # [n, rows]
    legacy.KERNELS[qtype].gemv(raw, x, out)
    assert_products_close(out, reference(qtype, raw, cols), x)


@pytest.mark.parametrize("qtype", (T.F32, T.F16, T.BF16), ids=lambda t: t.name)
@pytest.mark.parametrize("cols", (1, 33, 47))
def test_float_types_take_any_width(qtype, cols):
    rng = np.random.default_rng(cols)
    raw = random_raw(qtype, 9, cols, rng)
    x = rng.standard_normal((3, cols), dtype=np.float32)  # [3, cols]
    out = np.empty((3, 9), np.float32)  # [3, 9]
    legacy.KERNELS[qtype].gemv(raw, x, out)
    assert_products_close(out, reference(qtype, raw, cols), x)


def test_signs_offsets_and_fifth_bits_matter():
    """A single-block row with known quants: catches swapped nibbles, lost qh bits, wrong zero points."""
    x = np.arange(32, dtype=np.float32)[None, :] + 1  # [1, 32]
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        raw = random_raw(qtype, 1, 32, np.random.default_rng(int(qtype)))
        out = np.empty((1, 1), np.float32)  # [1, 1]
        legacy.KERNELS[qtype].gemv(raw, x, out)
        want = float(reference(qtype, raw, 32)[0] @ x[0])
        assert out[0, 0] == pytest.approx(want, rel=1e-5, abs=1e-5), qtype.name


def test_kernels_cover_every_legacy_type():
    assert set(legacy.KERNELS) == set(TYPES)
