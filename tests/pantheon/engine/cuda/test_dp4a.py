"""dp4a as the simulator runs it against numpy's int8 arithmetic; its PTX form is compiled by test_ptx."""

import numpy as np

from pantheon.engine.cuda.dp4a import _dp4a_python


def test_dp4a_sums_the_products_of_signed_bytes_plus_the_accumulator():
    rng = np.random.default_rng(0)
    a8, b8 = rng.integers(-128, 128, (2, 500, 4)).astype(np.int8)  # [500, 4] each
    acc = rng.integers(-10 ** 6, 10 ** 6, 500)  # [500]
    a32, b32 = a8.view(np.int32)[:, 0], b8.view(np.int32)[:, 0]  # [500] the bytes as little-endian words
    want = acc + (a8.astype(np.int64) * b8).sum(axis=1)  # [500]
    got = [_dp4a_python(a, b, c) for a, b, c in zip(a32, b32, acc)]
    np.testing.assert_array_equal(got, want)
    assert _dp4a_python(-1, 0x7F7F7F7F, 0) == -4 * 127  # a negative word is its two's complement bytes
    assert _dp4a_python(0x1_0000_0101, 0x0101, 3) == 5  # only the low 32 bits count
