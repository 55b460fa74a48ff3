"""The repacked K-quant field offsets: each super-block's fields tile its bytes exactly (kernels.repack's sizes)."""

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import q8k_repacked_layout as lay
from pantheon.engine.kernels.repack import LAYOUTS, Q6_ORDER, ROWS
from pantheon.engine.kernels.simd_lanes import k4_planes
from tests.pantheon.engine.kernels.blocks import k4_decoded


def test_q4_k_fields_end_where_the_super_block_ends():
    assert (lay.SC, lay.D, lay.DM) == (0, 12 * ROWS, 14 * ROWS)  # the file's 12 scale bytes, d, dmin first
    assert lay.qs_at.py_func(False) == lay.DM + 2 * ROWS  # then 256 nibbles of each row
    assert lay.qs_at.py_func(False) + 128 * ROWS == lay.GB == LAYOUTS[T.Q4_K][2] * ROWS


def test_k4_planes_decodes_every_scale_and_min_and_copies_d_and_dmin():
    """simd_lanes.k4_planes on 16 random planes (every bit pattern of the packed bytes is a valid block)
    against ggml's get_scale_min_k4, from an odd offset: scales at 32j, mins at MN + 32j, then the 128
    bytes of d and dmin at KD as they lay."""
    planes = np.random.default_rng(5).integers(0, 256, (16, ROWS), dtype=np.uint8)  # [16, 32]
    buf = np.concatenate([np.zeros(3, np.uint8), planes.reshape(-1)])  # [3 + 512]
    out = np.zeros(20 * ROWS, np.uint8)  # [20, 32]
    _decode(buf, 3, out)
    sc, mn = k4_decoded(planes[:12])  # [8, 32] each
    np.testing.assert_array_equal(out[:lay.MN].reshape(8, ROWS), sc)
    np.testing.assert_array_equal(out[lay.MN:lay.KD].reshape(8, ROWS), mn)
    assert lay.KD + 2 * lay.D_BYTES == out.size and lay.D_BYTES == lay.DM - lay.D
    np.testing.assert_array_equal(out[lay.KD:], planes[12:].reshape(-1))


@numba.njit
def _decode(buf, at, out):
    k4_planes(buf, at, out)


def test_q5_k_puts_its_qh_words_before_the_quants():
    assert lay.QH5 == lay.qs_at.py_func(False) and lay.QH5_BYTES == 32 * ROWS
    assert lay.qs_at.py_func(True) == lay.QH5 + lay.QH5_BYTES
    assert lay.GB5 == lay.GB + lay.QH5_BYTES == LAYOUTS[T.Q5_K][2] * ROWS


def test_q6_k_fields_end_where_the_super_block_ends():
    assert (lay.SC6, lay.D6 - lay.SC6) == (192 * ROWS, 16 * ROWS)  # ql and qh words, then the scales
    assert lay.D6 + 2 * ROWS == lay.GB6 == LAYOUTS[T.Q6_K][2] * ROWS
    assert lay.WORD == 4 * ROWS


def test_q6_k_words_lie_where_kernels_repack_put_them():
    """word6's place of each (half, w, part) holds the file word repack.Q6_ORDER put there, and a pass in
    (half, w, part) order reads the 48 words in address order."""
    seen = []
    for half in range(2):
        for q in range(2):
            for k in range(4):
                for part, file_word in enumerate((16 * half + 4 * q, 16 * half + 8 + 4 * q, 32 + 8 * half + 4 * q)):
                    at = lay.word6.py_func(0, half, 4 * q + k, part)
                    assert at % lay.WORD == 0 and Q6_ORDER[at // lay.WORD] == file_word + k
                    seen.append(at // lay.WORD)
    assert seen == list(range(48))
