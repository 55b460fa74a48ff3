"""The repacked layout of Q4_0 / Q8_0 weights: 32 rows' blocks interleaved so kernels read them as they lie.

q8dot_tiles interleaves 32 rows per task on every call, because the weights are zero-copy views of
the file: at 8 vectors that transpose was half of a product's time. Repacked weights are that
interleaved tile kept between calls (llama.cpp repacks Q4_0 at load for the same reason). Task t
holds rows 32t..32t+31, the last task padded with zero rows; per block b of 32 columns:

  quant words [w][row] u32  Q4_0: the file's 16 nibble bytes per row as 4 words (low nibbles are
                            quants 4w..4w+3, high nibbles 16+4w..19+4w);
                            Q8_0: the file's 32 int8 per row as 8 words, each byte + 128
                            (vpdpbusd's unsigned side)
  d [row] fp16              the file's scale, as stored

So a task's block is a permutation of the file's 32 blocks: the same bytes per row (18 / 34), and a
repacked weight is exactly as large as the file's, but for the padding rows.
"""

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

# Rows per task: two 16-lane groups.
ROWS = 32
# qtype -> (bytes per block of one row, quant words per block of one row)
LAYOUTS = {T.Q4_0: (GGML_QUANT_SIZES[T.Q4_0][1], 4), T.Q8_0: (GGML_QUANT_SIZES[T.Q8_0][1], 8)}


def supports(qtype):
    """True when `qtype` has a repacked layout."""
    return qtype in LAYOUTS


def nbytes(qtype, rows, cols):
    """Bytes of the repacked form of a rows x cols weight of `qtype` (rows padded to a task)."""
    block, _ = LAYOUTS[qtype]
    return -(-rows // ROWS) * ROWS * cols // 32 * block


def pack(qtype, raw, out=None):
    """raw uint8 [rows, row_bytes] in the file's layout -> uint8 [tasks, row_bytes · 32] repacked (into
    `out` when given, e.g. a slice of a memory map)."""
    block, words = LAYOUTS[qtype]
    rows, row_bytes = raw.shape
    tasks, nb = -(-rows // ROWS), row_bytes // block
    padded = np.zeros((tasks * ROWS, row_bytes), np.uint8)  # [tasks·32, row_bytes]
    padded[:rows] = raw
    blocks = padded.reshape(tasks, ROWS, nb, block)  # [tasks, 32, nb, block]
    qs = blocks[..., 2:].reshape(tasks, ROWS, nb, words, 4)  # [tasks, 32, nb, words, 4]
    if qtype == T.Q8_0:
        qs = qs ^ np.uint8(0x80)
    out = np.empty((tasks, nb * ROWS * block), np.uint8) if out is None else out  # [tasks, task_bytes]
    view = out.reshape(tasks, nb, ROWS * block)  # [tasks, nb, 32·block]
    qbytes = words * 4 * ROWS
    view[:, :, :qbytes] = qs.transpose(0, 2, 3, 1, 4).reshape(tasks, nb, qbytes)  # [tasks, nb, words·32·4]
    view[:, :, qbytes:] = blocks[..., :2].transpose(0, 2, 1, 3).reshape(tasks, nb, 2 * ROWS)  # [tasks, nb, 64]
    return out


def unpack(qtype, packed, rows):
    """The inverse of `pack`: uint8 [rows, row_bytes] in the file's layout (for tests and checks)."""
    block, words = LAYOUTS[qtype]
    tasks = packed.shape[0]
    nb = packed.shape[1] // (ROWS * block)
    view = packed.reshape(tasks, nb, ROWS * block)  # [tasks, nb, 32·block]
    qbytes = words * 4 * ROWS
    qs = view[:, :, :qbytes].reshape(tasks, nb, words, ROWS, 4).transpose(0, 3, 1, 2, 4)  # [tasks, 32, nb, w, 4]
    if qtype == T.Q8_0:
        qs = qs ^ np.uint8(0x80)
    d = view[:, :, qbytes:].reshape(tasks, nb, ROWS, 2).transpose(0, 2, 1, 3)  # [tasks, 32, nb, 2]
    blocks = np.concatenate([d, qs.reshape(tasks, ROWS, nb, words * 4)], axis=3)  # [tasks, 32, nb, block]
    return blocks.reshape(tasks * ROWS, nb * block)[:rows]
