"""The repacked K-quant field offsets: each super-block's fields tile its bytes exactly (kernels.repack's sizes)."""

from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import q8k_repacked_layout as lay
from pantheon.engine.kernels.repack import LAYOUTS, ROWS


def test_q4_k_fields_end_where_the_super_block_ends():
    assert lay.SC == 128 * ROWS  # 256 nibbles of each row first
    assert (lay.MN - lay.SC, lay.D - lay.MN, lay.DM - lay.D) == (8 * ROWS, 8 * ROWS, 2 * ROWS)
    assert lay.DM + 2 * ROWS == lay.GB == LAYOUTS[T.Q4_K][2] * ROWS


def test_q5_k_is_its_qh_words_then_q4_k():
    assert lay.QH5 == 128 * ROWS and lay.QH5_BYTES == 32 * ROWS
    assert lay.GB5 == lay.GB + lay.QH5_BYTES == LAYOUTS[T.Q5_K][2] * ROWS


def test_q6_k_fields_end_where_the_super_block_ends():
    assert (lay.QH6, lay.SC6 - lay.QH6, lay.D6 - lay.SC6) == (128 * ROWS, 64 * ROWS, 16 * ROWS)
    assert lay.D6 + 2 * ROWS == lay.GB6 == LAYOUTS[T.Q6_K][2] * ROWS
    assert lay.WORD == 4 * ROWS
