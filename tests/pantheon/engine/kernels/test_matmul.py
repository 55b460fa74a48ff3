"""matmul dispatch (raw-block gemv for few rows, dequantized tiles + BLAS for many) and dequantize_rows."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import legacy, matmul, registry
from pantheon.engine.weights import Weight
from tests.pantheon.engine.kernels.test_legacy import assert_products_close, random_raw, reference


@pytest.fixture(autouse=True)
def legacy_only(monkeypatch):
    """Serve the registry from legacy.KERNELS alone, so these tests do not depend on kquants."""
    monkeypatch.setattr(registry, "_TABLE", dict(legacy.KERNELS))


def weight(qtype, rows, cols, seed):
    return Weight("blk.0.ffn_down.weight", int(qtype), rows, cols, random_raw(qtype, rows, cols, np.random.default_rng(seed)))


@pytest.mark.parametrize("qtype", (T.Q4_0, T.Q8_0, T.Q5_1, T.F16, T.BF16, T.F32), ids=lambda t: t.name)
@pytest.mark.parametrize("n", (1, 2, 3, 4, 7, 130))
@pytest.mark.parametrize("rows,cols", ((7, 96), (100, 4096), (33, 32)))
def test_matmul_matches_reference(qtype, n, rows, cols):
    w = weight(qtype, rows, cols, n + rows)
    x = np.random.default_rng(n).standard_normal((n, cols), dtype=np.float32)  # [n, cols]
    assert_products_close(matmul.matmul(w, x), reference(qtype, w.raw, cols), x)


@pytest.mark.parametrize("n", (1, 5, 64))
def test_both_paths_agree_with_reference(monkeypatch, n):
    """Force each path in turn, with a tile that does not divide the rows."""
    w = weight(T.Q4_0, 300, 256, n)
    x = np.random.default_rng(n).standard_normal((n, 256), dtype=np.float32)  # [n, 256]
    want = reference(T.Q4_0, w.raw, 256)  # [300, 256]
    monkeypatch.setattr(matmul, "TILE_BYTES", 4 * 256 * 128)
    for max_batch in (0, 1000):  # tiles of 128 rows over 300: the last one is short
        monkeypatch.setattr(matmul, "GEMV_MAX_BATCH", max_batch)
        assert_products_close(matmul.matmul(w, x), want, x)


def test_matmul_writes_into_out():
    w = weight(T.Q8_0, 40, 64, 1)
    x = np.random.default_rng(2).standard_normal((9, 64), dtype=np.float32)  # [9, 64]
    out = np.full((9, 40), np.nan, np.float32)  # [9, 40]
    assert matmul.matmul(w, x, out=out) is out
    assert_products_close(out, reference(T.Q8_0, w.raw, 64), x)


@pytest.mark.parametrize("qtype", (T.Q4_0, T.Q8_0, T.Q5_0, T.F16), ids=lambda t: t.name)
def test_dequantize_rows_is_an_exact_lookup(qtype):
    w = weight(qtype, 50, 128, 3)
    ids = [49, 0, 7, 7, 13]
    got = matmul.dequantize_rows(w, ids)
    np.testing.assert_array_equal(got, reference(qtype, w.raw, 128)[ids].astype(np.float32))


def test_unsupported_type_is_refused():
    from pantheon.errors import UnsupportedTensorType

    w = Weight("x", int(T.IQ2_XXS), 1, 256, np.zeros((1, 66), np.uint8))
    with pytest.raises(UnsupportedTensorType):
        matmul.matmul(w, np.zeros((1, 256), np.float32))


def test_every_kernel_gets_the_weight_read_only(monkeypatch):
    """numba compiles once per argument signature, writability included: a Weight made from a writable array
    and the embedding lookup's row copy reach the kernels read-only, as a mapped file's views do."""
    real, seen = legacy.KERNELS[T.Q8_0], []

    def recording(kernel):
        def call(raw, *rest):
            seen.append(raw.flags.writeable)
            return kernel(raw, *rest)
        return call

    monkeypatch.setitem(registry._TABLE, T.Q8_0, legacy.QuantKernels(recording(real.gemv), recording(real.dequant)))
    raw = np.array(random_raw(T.Q8_0, 40, 64, np.random.default_rng(4)))  # [40, row_bytes], writable
    w = Weight("token_embd.weight", int(T.Q8_0), 40, 64, raw)
    matmul.dequantize_rows(w, [3, 1])
    matmul.matmul(w, np.ones((1, 64), np.float32))
    assert seen == [False, False]  # the lookup's dequant, then the product's gemv
    assert raw.flags.writeable  # the caller's array is left as it was
