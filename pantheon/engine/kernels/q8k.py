"""K-quant products with Q8_K activations: which types, and which kernel serves which batch on this host.

Every n goes through integer kernels (never dequantize + BLAS), and on one host every kernel of a
type computes each output with the same operations, so a sequence's logits do not depend on the
batch it ran in. Hosts with VNNI or AVX2 (kernels.vnni): q8k_rows reads rows in place for one vector,
q8k_lanes interleaves 32 rows per task for every larger batch (and for Q2_K, Q3_K always). q8k_dot's
1- and 4-vector kernels and q8k_tiles (rows unpacked once per task, from TILES_FROM vectors) are the
AVX2-only family these replaced on AVX2 hosts; `_product_avx2` keeps them, tested, for comparison.
"""

import functools

import numba
from gguf import GGMLQuantizationType

from pantheon.engine.kernels import q8k_dot, q8k_lanes, q8k_rows, q8k_tiles
from pantheon.engine.kernels.q8k_repacked import q4_k_repacked, q5_k_repacked, q6_k_repacked
from pantheon.engine.kernels.avx2 import has_avx2
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.q8k_acts import Q8K
from pantheon.engine.kernels.vnni import has_int8_dots
from pantheon.engine.kernels.stream import prefetch_ahead

# qtype name -> (direct 1-vector kernel or None, direct 4-vector kernel or None, q8k_tiles kind); without
# a 1-vector kernel q8k_tiles serves every n.
_BY_TYPE = {"Q4_K": (q8k_dot.q4_k, q8k_dot.q4_k_x4, q8k_tiles.Q4_K), "Q5_K": (q8k_dot.q5_k, None, q8k_tiles.Q5_K),
            "Q6_K": (q8k_dot.q6_k, q8k_dot.q6_k_x4, q8k_tiles.Q6_K), "Q2_K": (None, None, q8k_tiles.Q2_K),
            "Q3_K": (None, None, q8k_tiles.Q3_K)}
# qtype name -> (in-place kernel for few vectors or None, in-place 4-vector kernel or None, q8k_lanes kind),
# on hosts with VNNI or AVX2.
_BY_TYPE_512 = {"Q4_K": (q8k_rows.q4_k, q8k_rows.q4_k_x4, q8k_tiles.Q4_K),
                "Q5_K": (q8k_rows.q5_k, None, q8k_tiles.Q5_K),
                "Q6_K": (q8k_rows.q6_k, q8k_rows.q6_k_x4, q8k_tiles.Q6_K),
                "Q2_K": (None, None, q8k_tiles.Q2_K), "Q3_K": (None, None, q8k_tiles.Q3_K)}
# From this many vectors on, q8k_lanes serves the batch on VNNI hosts: for types with an in-place
# 4-vector kernel (Q4_K 5632x2048, 2 threads: even at 12-16 vectors), and for types with only a 1-vector
# one (Q5_K: 1.30 ms for 6 vectors one by one against 1.13 interleaved; 0.46 against 1.00 for 2).
LANES_FROM, LANES_FROM_1 = 16, 6
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


@functools.cache
def _kernels_512(qtype):
    """The kernels of `qtype` as in _BY_TYPE_512 where the int8 dot kernels run (VNNI, or AVX2's sequence:
    kernels.vnni), else None. AVX2 hosts take them too, though q8k_dot's were a little faster on rows in
    place (Q4_K 5632x2048 x12, one vector: 14.2 GB/s against 13.3), because the repacked kernels equal
    these bit for bit: a sequence's logits do not depend on whether the sidecar was there."""
    if not has_int8_dots():
        return None
    return _BY_TYPE_512.get(GGMLQuantizationType(qtype).name)


def supports(qtype, cols):
    """True when an integer Q8_K kernel serves `qtype` rows of `cols` values on this host."""
    return cols % QK_K == 0 and _kernels(qtype) is not None


def activations(x):
    """x float32 [n, cols] rounded once to Q8_K, for every K-quant weight that multiplies it."""
    return Q8K(x)


def product(qtype, raw, acts, out):
    """out [n, rows] = acts @ dequant(raw).T for a type that `supports`."""
    if _kernels_512(qtype) is not None:
        _product_512(qtype, raw, acts, out)
    else:
        _product_avx2(qtype, raw, acts, out)


def _product_512(qtype, raw, acts, out):
    """`product` with kernels.vnni's dots: in-place kernels for few vectors, q8k_lanes for more."""
    one, four, kind = _kernels_512(qtype)
    if one is None or acts.n >= (LANES_FROM if four is not None else LANES_FROM_1):
        q8k_lanes.tiles(kind, raw, acts.xq, acts.xd, acts.bs16, out, numba.get_num_threads())
        return
    m = acts.n - acts.n % 4 if four is not None else 0
    if m:
        four(raw, acts.xq[:m], acts.xd[:m], acts.bs16[:m], out[:m])
    if m < acts.n:
        one(raw, acts.xq[m:], acts.xd[m:], acts.bs16[m:], out[m:])


def _product_avx2(qtype, raw, acts, out):
    """`product` on an AVX2 host: q8k_dot's 1- and 4-vector kernels, q8k_tiles from TILES_FROM vectors."""
    one, four, kind = _kernels(qtype)
    m = acts.n if one is None else acts.n - acts.n % TILE
    if m and four is not None and m < TILES_FROM:
        four(raw, acts.xq[:m], acts.xd[:m], acts.bs16[:m], out[:m])
    elif m:
        q8k_tiles.tiles(kind, raw, acts.xq[:m], acts.xd[:m], acts.bs16[:m], out[:m])
    if m < acts.n:
        one(raw, acts.xq[m:], acts.xd[m:], acts.bs16[m:], out[m:])


# qtype -> the kernel on its repacked layout (kernels.repack), AVX-512 VNNI and AVX2 hosts (kernels.vnni).
_REPACKED = {GGMLQuantizationType.Q4_K: q4_k_repacked, GGMLQuantizationType.Q5_K: q5_k_repacked,
             GGMLQuantizationType.Q6_K: q6_k_repacked}


def repacked_kernel(qtype):
    """The kernel `product_repacked` calls for `qtype`: (packed, rows, xq, xd, bs16, out, threads, ahead)."""
    return _REPACKED[qtype]


def product_repacked(qtype, packed, rows, acts, out, threads=None):
    """`product` on the repacked copy (kernels.repack) of a `rows`-row Q4_K / Q5_K / Q6_K weight, on a VNNI
    or AVX2 host: one kernel for every n, with the same bits as `product`; `threads` None: numba's."""
    _REPACKED[qtype](packed, rows, acts.xq, acts.xd, acts.bs16, out, threads or numba.get_num_threads(),
                     prefetch_ahead(qtype, acts.n))
