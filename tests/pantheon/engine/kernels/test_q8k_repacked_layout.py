"""The repacked K-quant field offsets: each super-block's fields tile its bytes exactly (kernels.repack's sizes)."""

from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import q8k_repacked_layout as lay
from pantheon.engine.kernels.repack import LAYOUTS, Q6_ORDER, ROWS


def test_q4_k_fields_end_where_the_super_block_ends():
    assert lay.SC == 128 * ROWS  # 256 nibbles of each row first
    assert (lay.MN - lay.SC, lay.D - lay.MN, lay.DM - lay.D) == (8 * ROWS, 8 * ROWS, 2 * ROWS)
    assert lay.DM + 2 * ROWS == lay.GB == LAYOUTS[T.Q4_K][2] * ROWS


def test_q5_k_is_its_qh_words_then_q4_k():
    assert lay.QH5 == 128 * ROWS and lay.QH5_BYTES == 32 * ROWS
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
