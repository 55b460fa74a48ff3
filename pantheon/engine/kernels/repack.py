"""The repacked layout of Q4_0 / Q8_0 / Q4_K..Q6_K weights: 32 rows' blocks interleaved, read as they lie.

The tiles kernels interleave 32 rows per task on every call, because the weights are zero-copy
views of the file: at 8 vectors that transpose was half of a product's time. Repacked weights are that
interleaved tile kept between calls (llama.cpp repacks Q4_0 at load for the same reason). Task t
holds rows 32t..32t+31, the last task padded with zero rows; per block b, the block's fields one
after another, each as [unit][row] (a unit: the bytes one row contributes at a time):

  Q4_0  quants: 4 words (the file's 16 nibble bytes: low nibbles are quants 4w..4w+3, high
        nibbles 16+4w..19+4w), then d: fp16
  Q8_0  quants: 8 words (the file's 32 int8, each + 128: vpdpbusd's unsigned side), then d: fp16
  Q4_K  quants: 32 words (pair p, word w: low nibbles are values 64p+4w.., high 64p+32+4w..),
        then the 8 six-bit scales and the 8 six-bit mins decoded to one byte each, then d, then
        dmin: fp16
  Q5_K  as Q4_K, with the file's 32 qh bytes as 8 words between the quants and the scales (bit 2p
        of qh byte l is the fifth bit of value 64p+l, bit 2p+1 that of 64p+32+l)
  Q6_K  the file's ql (32 words) and qh (16 words) by quarter: quarter (h, q) holds, for k = 0..3,
        ql word 16h+4q+k, ql word 16h+8+4q+k and qh word 8h+4q+k (the three one 6-bit value is
        assembled from), so a pass reads a super-block strictly in address order and the hardware
        prefetcher follows it; then the 16 int8 scales, d: fp16 (half h's ql bytes l and l + 32 and
        qh byte l hold values 128h + l, +32, +64, +96)

Q4_0, Q8_0 and Q6_K are a permutation of the file's bytes (18 / 34 / 210 per row and block); Q4_K
and Q5_K grow by 4 bytes per row and super-block (144 -> 148, 176 -> 180: the 12 packed scale bytes
become 16), so no kernel decodes them.
"""

import numpy as np
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels.contract import read_only

# Rows per task: two 16-lane groups.
ROWS = 32
# qtype -> (values per block, file bytes per block of one row, repacked bytes per block of one row)
LAYOUTS = {T.Q4_0: (32, 18, 18), T.Q8_0: (32, 34, 34), T.Q4_K: (256, 144, 148), T.Q5_K: (256, 176, 180),
           T.Q6_K: (256, 210, 210)}


def supports(qtype, cols):
    """True when `qtype` rows of `cols` values have a repacked layout."""
    return qtype in LAYOUTS and cols % LAYOUTS[qtype][0] == 0


def nbytes(qtype, rows, cols):
    """Bytes of the repacked form of a rows x cols weight of `qtype` (rows padded to a task)."""
    values, _, packed = LAYOUTS[qtype]
    return -(-rows // ROWS) * ROWS * cols // values * packed


# Q6_K's 48 quant words (the file's ql words 0..31, then qh words as 32..47) in layout order.
Q6_ORDER = np.array([base + k for h in (0, 1) for q in (0, 1) for k in range(4)
                     for base in (16 * h + 4 * q, 16 * h + 8 + 4 * q, 32 + 8 * h + 4 * q)])


def _fields(qtype, blocks):
    """The block's fields in layout order, each uint8 [tasks, 32, nb, units, unit bytes]."""
    tasks, rows, nb, _ = blocks.shape
    if qtype == T.Q6_K:
        words = blocks[..., :192].reshape(tasks, rows, nb, 48, 4)[..., Q6_ORDER, :]  # [tasks, 32, nb, 48, 4]
        return words, blocks[..., 192:208, None], blocks[..., None, 208:210]
    if qtype in (T.Q4_K, T.Q5_K):
        sc, mn = _k4_scales(blocks[..., 4:16])  # [tasks, 32, nb, 8] each
        qh = (blocks[..., 16:48].reshape(tasks, rows, nb, 8, 4),) if qtype == T.Q5_K else ()
        return (blocks[..., -128:].reshape(tasks, rows, nb, 32, 4), *qh, sc[..., None], mn[..., None],
                blocks[..., None, 0:2], blocks[..., None, 2:4])
    qs = blocks[..., 2:].reshape(tasks, rows, nb, -1, 4)  # [tasks, 32, nb, words, 4]
    return (qs ^ np.uint8(0x80) if qtype == T.Q8_0 else qs), blocks[..., None, 0:2]


def _k4_scales(q):
    """ggml's get_scale_min_k4 over every block: q uint8 [..., 12] -> 8 scales, 8 mins (uint8 [..., 8])."""
    lo, mid, hi = q[..., 0:4], q[..., 4:8], q[..., 8:12]
    sc = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=-1)  # [..., 8]
    mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=-1)  # [..., 8]
    return sc, mn


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
        qs, sc, mn, d, dmin = fields
        fields = [d, dmin, _k4_pack(sc, mn), qs]
    elif qtype == T.Q5_K:
        qs, qh, sc, mn, d, dmin = fields
        fields = [d, dmin, _k4_pack(sc, mn), qh, qs]
    elif qtype == T.Q6_K:
        words = fields[0].reshape(tasks, ROWS, -1, 48, 4)[..., np.argsort(Q6_ORDER), :]  # [tasks, 32, nb, 48, 4]
        fields = [words.reshape(tasks, ROWS, -1, 192), *fields[1:]]
    else:  # Q4_0 / Q8_0 keep d first in the file
        fields = [fields[1], fields[0] ^ np.uint8(0x80) if qtype == T.Q8_0 else fields[0]]
    return np.concatenate(fields, axis=3).reshape(tasks * ROWS, nb * block)[:rows]


def _k4_pack(sc, mn):
    """The inverse of `_k4_scales`: 8 six-bit scales and mins -> ggml's 12 packed bytes."""
    lo = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)  # [..., 4]
    mid = mn[..., :4] | ((mn[..., 4:] >> 4) << 6)  # [..., 4]
    hi = (sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)  # [..., 4]
    return np.concatenate([lo, mid, hi], axis=-1)
