"""K-quant products with Q8_K activations on AVX2: which types, and which kernel serves which batch.

Every n goes through the integer kernels (never dequantize + BLAS): n a multiple of 4 through
q8k_tiles (rows unpacked once per task), the rest through q8k_dot (Q2_K and Q3_K: q8k_tiles for
every n), and both compute each output
with the same operations, so a sequence's logits do not depend on the batch it ran in.
"""

import functools

from gguf import GGMLQuantizationType

from pantheon.engine.kernels import q8k_dot, q8k_tiles
from pantheon.engine.kernels.avx2 import has_avx2
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.q8k_acts import Q8K

# qtype name -> (direct 1-vector kernel or None, direct 4-vector kernel or None, q8k_tiles kind); without
# a 1-vector kernel q8k_tiles serves every n.
_BY_TYPE = {"Q4_K": (q8k_dot.q4_k, q8k_dot.q4_k_x4, q8k_tiles.Q4_K), "Q5_K": (q8k_dot.q5_k, None, q8k_tiles.Q5_K),
            "Q6_K": (q8k_dot.q6_k, q8k_dot.q6_k_x4, q8k_tiles.Q6_K), "Q2_K": (None, None, q8k_tiles.Q2_K),
            "Q3_K": (None, None, q8k_tiles.Q3_K)}
# Vectors per q8k_tiles pass.
TILE = 4
# Below this many vectors a direct 4-vector kernel (where one exists) beats unpacking rows for tiles:
# batched decode. Measured on Q4_K 5632x2048, 2 threads: see docs/performance.md.
TILES_FROM = 16


@functools.cache
def _kernels(qtype):
    """The kernels of `qtype` as in _BY_TYPE, or None: one enum lookup per type, not per call."""
    if not has_avx2():
        return None
    return _BY_TYPE.get(GGMLQuantizationType(qtype).name)


def supports(qtype, cols):
    """True when an integer Q8_K kernel serves `qtype` rows of `cols` values on this host."""
    return cols % QK_K == 0 and _kernels(qtype) is not None


def activations(x):
    """x float32 [n, cols] rounded once to Q8_K, for every K-quant weight that multiplies it."""
    return Q8K(x)


def product(qtype, raw, acts, out):
    """out [n, rows] = acts @ dequant(raw).T for a type that `supports`."""
    one, four, kind = _kernels(qtype)
    m = acts.n if one is None else acts.n - acts.n % TILE
    if m and four is not None and m < TILES_FROM:
        four(raw, acts.xq[:m], acts.xd[:m], acts.bs16[:m], out[:m])
    elif m:
        q8k_tiles.tiles(kind, raw, acts.xq[:m], acts.xd[:m], acts.bs16[:m], out[:m])
    if m < acts.n:
        one(raw, acts.xq[m:], acts.xd[m:], acts.bs16[m:], out[m:])
