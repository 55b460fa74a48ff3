"""The 16-bit float kernels: exact widening of every bit pattern, and a vector's product independent of its batch."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import floats
from pantheon.engine.kernels.contract import read_only

# read-only, as a model's weights reach the kernels
EVERY_PATTERN = read_only(np.arange(65536, dtype=np.uint32).astype(np.uint16))  # [65536]: every 16-bit pattern


def assert_same_values(got, want):
    """Bit for bit, signed zeros and subnormals included; a NaN stays a NaN (the conversion instruction quiets
    a signalling one, which no weight is)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_every_float16_pattern_widens_exactly():
    """64 rows of 1,024: the 16-lane body and no tail."""
    out = np.empty((64, 1024), np.float32)  # [64, 1024]
    floats.dequant_f16(EVERY_PATTERN.reshape(64, 1024).view(np.uint8), out)
    assert_same_values(out.reshape(-1), EVERY_PATTERN.view(np.float16).astype(np.float32))


@pytest.mark.parametrize("qtype", (T.F16, T.BF16), ids=lambda t: t.name)
def test_every_pattern_multiplies_as_its_exact_value(qtype):
    """One weight per row, every pattern, times 1.0 (one column: the scalar tail widens it); compared as values,
    since a sum starting from +0 turns -0 into +0."""
    raw = EVERY_PATTERN.reshape(-1, 1).view(np.uint8)  # [65536, 2]: one 16-bit weight per row
    out = np.empty((1, 65536), np.float32)  # [1, 65536]
    floats.KERNELS[qtype].gemv(raw, np.ones((1, 1), np.float32), out)
    if qtype == T.F16:
        want = EVERY_PATTERN.view(np.float16).astype(np.float32)  # [65536]
    else:
        want = (EVERY_PATTERN.astype(np.uint32) << 16).view(np.float32)  # [65536]
    np.testing.assert_array_equal(out[0], want)


@pytest.mark.parametrize("qtype", (T.F16, T.BF16), ids=lambda t: t.name)
def test_the_lanes_widen_as_the_tail_does(qtype):
    """Every pattern in the 16-lane body of 64-wide rows, against one-hot vectors picking each column."""
    raw = EVERY_PATTERN.reshape(1024, 64).view(np.uint8)  # [1024, 128]: 64 weights a row
    out = np.empty((64, 1024), np.float32)  # [64, 1024]
    floats.KERNELS[qtype].gemv(raw, np.eye(64, dtype=np.float32), out)
    bits = EVERY_PATTERN.reshape(1024, 64).T  # [64, 1024]: column j's patterns
    want = bits.view(np.float16).astype(np.float32) if qtype == T.F16 else (bits.astype(np.uint32) << 16).view(
        np.float32)  # [64, 1024]
    finite = np.isfinite(want)  # a one-hot dot adds 0 x the other weights: an infinity or NaN there spoils it
    np.testing.assert_array_equal(out[finite], want[finite])


@pytest.mark.parametrize("qtype", (T.F16, T.BF16), ids=lambda t: t.name)
@pytest.mark.parametrize("cols", (64, 1000, 2048))
def test_a_vectors_product_is_the_same_bits_in_any_batch(qtype, cols):
    rng = np.random.default_rng(cols)
    w = rng.standard_normal((37, cols), dtype=np.float32)  # [37, cols]
    raw = read_only(w.astype(np.float16).view(np.uint8) if qtype == T.F16
                    else (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8))  # [37, 2 * cols]
    x = rng.standard_normal((8, cols), dtype=np.float32)  # [8, cols]
    whole = np.empty((8, 37), np.float32)  # [8, 37]
    floats.KERNELS[qtype].gemv(raw, x, whole)
    for i in range(8):
        alone = np.empty((1, 37), np.float32)  # [1, 37]
        floats.KERNELS[qtype].gemv(raw, x[i:i + 1], alone)
        np.testing.assert_array_equal(alone[0], whole[i])
