"""Quantize float weights to Q8_0 at load time (the CLI's --quantize): half the memory of F16."""

import numpy as np
from gguf import GGMLQuantizationType

from pantheon.engine.kernels.matmul import dequantize_rows
from pantheon.engine.model_weights import map_weights
from pantheon.engine.weights import Weight
from pantheon.gguf.ggml import FLOAT_TYPES, Q8_0_BLOCK as BLOCK


def quantize_q8_0(x):
    """x float32 [rows, cols] (cols % 32 == 0) -> uint8 [rows, cols/32*34] in ggml's Q8_0 layout."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // BLOCK, BLOCK)  # [rows, nb, 32]
    d = np.abs(blocks).max(axis=-1) / np.float32(127.0)  # [rows, nb]
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)  # [rows, nb]
    q = np.round(blocks * inv[..., None]).astype(np.int8)  # [rows, nb, 32]
    out = np.empty((rows, cols // BLOCK, 2 + BLOCK), dtype=np.uint8)  # [rows, nb, 34]
    out[..., :2] = d.astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(rows, -1)  # [rows, nb*34]


def to_q8_0(w, chunk=1024):
    """A Q8_0 copy of a float Weight (others are returned as they are), converted `chunk` rows at a time."""
    if w.qtype not in FLOAT_TYPES or w.cols % BLOCK:
        return w
    raw = np.empty((w.rows, w.cols // BLOCK * (2 + BLOCK)), dtype=np.uint8)  # [rows, row_bytes]
    for r0 in range(0, w.rows, chunk):
        rows = np.arange(r0, min(r0 + chunk, w.rows))  # [chunk]
        raw[r0:r0 + len(rows)] = quantize_q8_0(dequantize_rows(w, rows))
    return Weight(w.name, int(GGMLQuantizationType.Q8_0), w.rows, w.cols, raw)


def quantize_weights(weights):
    """ModelWeights with every float matrix converted to Q8_0; a tied output stays tied."""
    return map_weights(weights, to_q8_0)
