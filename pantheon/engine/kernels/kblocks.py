"""Field readers shared by the K-quant kernels: fp16 scales, 6-bit packed scales, activation sums."""

import numpy as np
from pantheon.engine.kernels.jit import inline, serial

QK_K = 256
# Rows per prange task: enough work per task to hide the dispatch, enough tasks to balance two threads.
ROW_CHUNK = 16


@inline
def f16_at(raw, r, o, tbl):
    """float32 value of the little-endian fp16 at raw[r, o:o+2]."""
    return tbl[np.int32(raw[r, o]) | (np.int32(raw[r, o + 1]) << np.int32(8))]


@inline
def scale_min_k4(raw, r, o, j):
    """(scale, min) 6-bit pair of sub-block j from the 12 packed bytes at raw[r, o:o+12] (Q4_K, Q5_K)."""
    if j < 4:
        sc = np.int32(raw[r, o + j]) & np.int32(63)
        mn = np.int32(raw[r, o + j + 4]) & np.int32(63)
    else:
        lo = np.int32(raw[r, o + j + 4])
        sc = (lo & np.int32(15)) | ((np.int32(raw[r, o + j - 4]) >> np.int32(6)) << np.int32(4))
        mn = (lo >> np.int32(4)) | ((np.int32(raw[r, o + j]) >> np.int32(6)) << np.int32(4))
    return np.float32(sc), np.float32(mn)


@serial
def group_sums(x, group):
    """float32 [n, cols / group]: sums of consecutive `group` activations (folds K-quant mins out)."""
    n, cols = x.shape
    ng = cols // group
    s = np.empty((n, ng), np.float32)  # [n, cols/group]
    for i in range(n):
        for g in range(ng):
            t = np.float32(0.0)
            for l in range(group):
                t += x[i, g * group + l]
            s[i, g] = t
    return s

