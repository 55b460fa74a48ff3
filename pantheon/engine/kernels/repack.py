"""The repacked layout of Q4_0 / Q8_0 / Q4_K..Q6_K weights: 32 rows' blocks interleaved, read as they lie.

The tiles kernels interleave 32 rows per task on every call, because the weights are zero-copy
views of the file: at 8 vectors that transpose was half of a product's time. Repacked weights are that
interleaved tile kept between calls (llama.cpp repacks Q4_0 at load for the same reason). Task t
holds rows 32t..32t+31, the last task padded with zero rows; per block b, the block's fields one
after another, each as [unit][row] (a unit: the bytes one row contributes at a time):

  Q4_0  quants: 4 words (the file's 16 nibble bytes: low nibbles are quants 4w..4w+3, high
        nibbles 16+4w..19+4w), then d: fp16
  Q8_0  quants: 8 words (the file's 32 int8, each + 128: vpdpbusd's unsigned side), then d: fp16
  Q4_K  the file's 12 packed bytes of six-bit scales and mins (12 units of one byte; the kernels
        decode them per super-block, simd_lanes.k4_planes), d, dmin: fp16, then the quants: 32
        words (pair p, word w: low nibbles are values 64p+4w.., high 64p+32+4w..); the fields a
        pass needs first come first, so it reads a super-block in address order
  Q5_K  as Q4_K, with the file's 32 qh bytes as 8 words between dmin and the quants (bit 2p of
        qh byte l is the fifth bit of value 64p+l, bit 2p+1 that of 64p+32+l)
  Q6_K  the file's 6-bit values re-cut into three planes of bytes (`_six_planes`): half h's values
        128h + l, +32, +64 (l = 0..31) whole in the low 6 bits of planes 0, 1, 2, and the fourth,
        128h + l + 96, in their top 2 bits (its bits 4-5, 2-3, 0-1): on AVX2 a value costs one vpand,
        the fourth 8 operations, where the file's nibbles and 2-bit fields cost 17 for the four. The
        planes stand where the file's ql (32 words: 0 at ql bytes 64h + l, 1 at 64h + 32 + l) and qh
        (16 words: 2 at qh byte 32h + l) lie, taken by quarter: quarter (h, q) holds, for k = 0..3,
        words 16h+4q+k, 16h+8+4q+k and 32+8h+4q+k of those 48, so a pass reads a super-block strictly
        in address order and the hardware prefetcher follows it; then the 16 int8 scales, d: fp16
        (first, as Q4_K's, its single-vector pass streamed 20-30 % slower)

Every layout is a permutation of the file's bytes (Q4_0, Q8_0, Q4_K, Q5_K: 18, 34, 144, 176 per row
and block) or, Q6_K, of its bits (210 bytes): a decode step streams no more than the file holds.
"""

import numpy as np
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels.contract import read_only

# Rows per task: two 16-lane groups.
ROWS = 32
# qtype -> (values per block, file bytes per block of one row, repacked bytes per block of one row)
LAYOUTS = {T.Q4_0: (32, 18, 18), T.Q8_0: (32, 34, 34), T.Q4_K: (256, 144, 144), T.Q5_K: (256, 176, 176),
           T.Q6_K: (256, 210, 210)}


def supports(qtype, cols):
    """True when `qtype` rows of `cols` values have a repacked layout."""
    return qtype in LAYOUTS and cols % LAYOUTS[qtype][0] == 0


def nbytes(qtype, rows, cols):
    """Bytes of the repacked form of a rows x cols weight of `qtype` (rows padded to a task)."""
    values, _, packed = LAYOUTS[qtype]
    return -(-rows // ROWS) * ROWS * cols // values * packed


# Q6_K's 48 quant words (the planes in the file's ql words 0..31, then its qh words as 32..47) in layout order.
Q6_ORDER = np.array([base + k for h in (0, 1) for q in (0, 1) for k in range(4)
                     for base in (16 * h + 4 * q, 16 * h + 8 + 4 * q, 32 + 8 * h + 4 * q)])


def _fields(qtype, blocks):
    """The block's fields in layout order, each uint8 [tasks, 32, nb, units, unit bytes]."""
    tasks, rows, nb, _ = blocks.shape
    if qtype == T.Q6_K:
        planes = _six_planes(blocks[..., :192])  # [tasks, 32, nb, 192]
        words = planes.reshape(tasks, rows, nb, 48, 4)[..., Q6_ORDER, :]  # [tasks, 32, nb, 48, 4]
        return words, blocks[..., 192:208, None], blocks[..., None, 208:210]
    if qtype in (T.Q4_K, T.Q5_K):
        qh = (blocks[..., 16:48].reshape(tasks, rows, nb, 8, 4),) if qtype == T.Q5_K else ()
        return (blocks[..., 4:16, None], blocks[..., None, 0:2], blocks[..., None, 2:4], *qh,
                blocks[..., -128:].reshape(tasks, rows, nb, 32, 4))
    qs = blocks[..., 2:].reshape(tasks, rows, nb, -1, 4)  # [tasks, 32, nb, words, 4]
    return (qs ^ np.uint8(0x80) if qtype == T.Q8_0 else qs), blocks[..., None, 0:2]


def pack(qtype, raw):
    """raw uint8 [rows, row_bytes] in the file's layout -> uint8 [tasks, 32 · repacked row bytes], read-only
    as the sidecar's mapped view is (kernels.contract)."""
    _, block, packed = LAYOUTS[qtype]
    rows, row_bytes = raw.shape
    tasks, nb = -(-rows // ROWS), row_bytes // block
    padded = np.zeros((tasks * ROWS, row_bytes), np.uint8)  # [tasks·32, row_bytes]
    padded[:rows] = raw
    blocks = padded.reshape(tasks, ROWS, nb, block)  # [tasks, 32, nb, block]
    parts = [f.transpose(0, 2, 3, 1, 4).reshape(tasks, nb, -1) for f in _fields(qtype, blocks)]  # [tasks, nb, *]
    return read_only(np.concatenate(parts, axis=2).reshape(tasks, nb * ROWS * packed))  # [tasks, task bytes]


def unpack(qtype, packed, rows):
    """The inverse of `pack`: uint8 [rows, row_bytes] in the file's layout (for tests and checks)."""
    _, block, width = LAYOUTS[qtype]
    tasks = packed.shape[0]
    nb = packed.shape[1] // (ROWS * width)
    view = packed.reshape(tasks, nb, ROWS * width)  # [tasks, nb, 32 · width]
    shapes = [f.shape[3:] for f in _fields(qtype, np.zeros((1, ROWS, 1, block), np.uint8))]
    fields, at = [], 0
    for units, unit in shapes:
        part = view[:, :, at:at + units * ROWS * unit].reshape(tasks, nb, units, ROWS, unit)
        fields.append(part.transpose(0, 3, 1, 2, 4).reshape(tasks, ROWS, nb, units * unit))  # [tasks, 32, nb, *]
        at += units * ROWS * unit
    if qtype == T.Q4_K:
        sc, d, dmin, qs = fields
        fields = [d, dmin, sc, qs]
    elif qtype == T.Q5_K:
        sc, d, dmin, qh, qs = fields
        fields = [d, dmin, sc, qh, qs]
    elif qtype == T.Q6_K:
        words = fields[0].reshape(tasks, ROWS, -1, 48, 4)[..., np.argsort(Q6_ORDER), :]  # [tasks, 32, nb, 48, 4]
        fields = [_file_bits(words.reshape(tasks, ROWS, -1, 192)), *fields[1:]]
    else:  # Q4_0 / Q8_0 keep d first in the file
        fields = [fields[1], fields[0] ^ np.uint8(0x80) if qtype == T.Q8_0 else fields[0]]
    return np.concatenate(fields, axis=3).reshape(tasks * ROWS, nb * block)[:rows]


def _six_values(q):
    """Q6_K's ql, qh bytes q uint8 [..., 192] -> its 6-bit values a, b, c, d [..., 2, 32] each (half h,
    position l: values 128h + l, +32, +64, +96, ggml's dequantize_row_q6_K)."""
    ql, qh = q[..., :128].reshape(*q.shape[:-1], 2, 64), q[..., 128:].reshape(*q.shape[:-1], 2, 32)
    lo, hi = ql[..., :32], ql[..., 32:]  # [..., 2, 32] each
    return ((lo & 15) | (qh & 3) << 4, (hi & 15) | (qh >> 2 & 3) << 4,
            lo >> 4 | (qh >> 4 & 3) << 4, hi >> 4 | (qh >> 6) << 4)


def _six_planes(q):
    """Q6_K's ql, qh bytes q uint8 [..., 192] -> the planes that stand in their place (module docstring)."""
    a, b, c, d = _six_values(q)  # [..., 2, 32] each
    p0, p1, p2 = a | (d >> 4) << 6, b | (d >> 2 & 3) << 6, c | (d & 3) << 6  # [..., 2, 32] each
    ql = np.concatenate([p0, p1], axis=-1).reshape(*q.shape[:-1], 128)  # [..., 128]
    return np.concatenate([ql, p2.reshape(*q.shape[:-1], 64)], axis=-1)  # [..., 192]


def _file_bits(planes):
    """The inverse of `_six_planes`: the planes uint8 [..., 192] -> the file's ql, qh bytes [..., 192]."""
    p = planes[..., :128].reshape(*planes.shape[:-1], 2, 64)
    p0, p1, p2 = p[..., :32], p[..., 32:], planes[..., 128:].reshape(*planes.shape[:-1], 2, 32)  # [..., 2, 32]
    a, b, c, d = p0 & 63, p1 & 63, p2 & 63, (p0 >> 6) << 4 | (p1 >> 6) << 2 | p2 >> 6  # [..., 2, 32] each
    ql = np.concatenate([(a & 15) | (c & 15) << 4, (b & 15) | (d & 15) << 4], axis=-1)  # [..., 2, 64]
    qh = a >> 4 | (b >> 4) << 2 | (c >> 4) << 4 | (d >> 4) << 6  # [..., 2, 32]
    return np.concatenate([ql.reshape(*planes.shape[:-1], 128), qh.reshape(*planes.shape[:-1], 64)], axis=-1)
