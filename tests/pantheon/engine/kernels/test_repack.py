"""The repacked layout: exactly the documented byte positions, and a lossless rearrangement of the file."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from pantheon.engine.kernels import repack
from tests.pantheon.engine.kernels.blocks import k4_decoded, random_blocks

# 85 rows: two full 32-row tasks and one of 21 (11 padding rows).
ROWS, COLS = 85, 256


@pytest.mark.parametrize("qtype", (T.Q4_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K))
def test_round_trip_and_size(qtype):
    raw = random_blocks(qtype, ROWS, COLS, np.random.default_rng(int(qtype)))
    p = repack.pack(qtype, raw)
    assert p.shape == (3, raw.shape[1] * 32) and p.nbytes == repack.nbytes(qtype, ROWS, COLS)  # no byte added
    np.testing.assert_array_equal(repack.unpack(qtype, p, ROWS), raw)


@pytest.mark.parametrize("qtype,words", ((T.Q4_0, 4), (T.Q8_0, 8)))
def test_bytes_lie_where_the_layout_says(qtype, words):
    """Row r of task t, block b: quant word w at b·G + w·128 + 4·(r % 32), d at b·G + words·128 + 2·(r % 32),
    G = 32 rows' block bytes; Q8_0 quants + 128. Checked byte by byte against the file's block."""
    raw = random_blocks(qtype, ROWS, COLS, np.random.default_rng(7))
    p = repack.pack(qtype, raw)
    block = raw.shape[1] // (COLS // 32)
    group = 32 * block
    flip = 0x80 if qtype == T.Q8_0 else 0
    for r in (0, 17, 31, 40, 84):
        t, lane = divmod(r, 32)
        for b in range(COLS // 32):
            src = raw[r, b * block:(b + 1) * block]  # [block] the file's block: fp16 d, then quants
            at = b * group + words * 128 + 2 * lane
            assert bytes(p[t, at:at + 2]) == bytes(src[:2])
            for w in range(words):
                at = b * group + w * 128 + 4 * lane
                assert bytes(p[t, at:at + 4]) == bytes(src[2 + 4 * w:6 + 4 * w] ^ flip)


def test_padding_rows_are_zero():
    raw = random_blocks(T.Q4_0, ROWS, COLS, np.random.default_rng(3))
    p = repack.pack(T.Q4_0, raw).reshape(3, COLS // 32, 32 * 18)  # [tasks, nb, 32 rows' block]
    lanes = slice(4 * (ROWS % 32), 128)
    for w in range(4):
        assert not p[2, :, w * 128:(w + 1) * 128][:, lanes].any()
    assert not p[2, :, 512 + 2 * (ROWS % 32):].any()


def test_q4_k_layout_dequantizes_to_gguf_values():
    """Every value rebuilt from the documented Q4_K layout alone, d·sc·q − dmin·m, equals gguf-py's
    dequantization of the file's block."""
    raw = random_blocks(T.Q4_K, ROWS, COLS, np.random.default_rng(11))
    nb = COLS // 256
    blk = repack.pack(T.Q4_K, raw).reshape(3, nb, 144 * 32)  # [tasks, nb, 32 rows' super-block]
    sc, mn = (v.astype(np.float32) for v in k4_decoded(blk[..., :384].reshape(3, nb, 12, 32)))  # [.., 8, row]
    d = blk[..., 384:448].copy().view(np.float16).astype(np.float32)  # [tasks, nb, row]
    dmin = blk[..., 448:512].copy().view(np.float16).astype(np.float32)  # [tasks, nb, row]
    qs = blk[..., 512:].reshape(3, nb, 4, 8, 32, 4)  # [tasks, nb, pair, word, row, byte]
    q = np.stack([qs & 15, qs >> 4], axis=3)  # [tasks, nb, pair, half, word, row, byte]
    q = q.transpose(0, 5, 1, 2, 3, 4, 6).reshape(3, 32, nb, 8, 32).astype(np.float32)  # [tasks, row, nb, sub, 32]
    scale = (d[:, :, None, :] * sc).transpose(0, 3, 1, 2)[..., None]  # [tasks, row, nb, sub, 1]
    shift = (dmin[:, :, None, :] * mn).transpose(0, 3, 1, 2)[..., None]  # [tasks, row, nb, sub, 1]
    got = (scale * q - shift).reshape(96, COLS)[:ROWS]  # [rows, cols]
    np.testing.assert_allclose(got, dequantize(raw, T.Q4_K), rtol=1e-6, atol=1e-7)


def test_q6_k_planes_dequantize_to_gguf_values():
    """Every value rebuilt from the documented Q6_K layout alone (three planes of 6-bit values, the fourth
    value in their top bits; int8 scales; d), d·sc·(q − 32), equals gguf-py's dequantization."""
    raw = random_blocks(T.Q6_K, ROWS, COLS, np.random.default_rng(13))
    nb = COLS // 256
    blk = repack.pack(T.Q6_K, raw).reshape(3, nb, 210 * 32)  # [tasks, nb, 32 rows' super-block]
    pl = blk[..., :6144].reshape(3, nb, 2, 2, 4, 3, 32, 4)  # [tasks, nb, half, quarter, word, plane, row, byte]
    top = (pl[..., 0, :, :] >> 6) << 4 | (pl[..., 1, :, :] >> 6) << 2 | pl[..., 2, :, :] >> 6  # [.., row, byte]
    q = np.stack([pl[..., 0, :, :] & 63, pl[..., 1, :, :] & 63, pl[..., 2, :, :] & 63, top], axis=3)
    # q: [tasks, nb, half, group (+32 each), quarter, word, row, byte] -> value 128·half + 32·group + 16·quarter
    # + 4·word + byte
    q = q.transpose(0, 6, 1, 2, 3, 4, 5, 7).reshape(3, 32, nb, 256).astype(np.float32)  # [tasks, row, nb, 256]
    sc = blk[..., 6144:6656].view(np.int8).reshape(3, nb, 16, 32).astype(np.float32)  # [tasks, nb, 16, row]
    d = blk[..., 6656:6720].copy().view(np.float16).astype(np.float32)  # [tasks, nb, row]
    scale = (d[:, :, None, :] * sc).transpose(0, 3, 1, 2).repeat(16, axis=3)  # [tasks, row, nb, 256]
    got = (scale * (q - 32)).reshape(96, COLS)[:ROWS]  # [rows, cols]
    np.testing.assert_allclose(got, dequantize(raw, T.Q6_K), rtol=1e-6, atol=1e-7)
