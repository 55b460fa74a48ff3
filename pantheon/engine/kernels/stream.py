"""How far ahead of its reads a repacked kernel prefetches its weight stream, per host microarchitecture.

Decode streams every weight from DRAM once per step, so how the stream is fetched sets its speed. The
two hosts these kernels were measured on want different things (docs/performance.md, "Weight streams
on Zen 4"):
- Intel (a Sapphire Rapids-class Xeon VM): without a software prefetch the Q4_0 1-vector kernel
  waited on memory for more than half its time; 4096 bytes ahead halved that.
- AMD Zen 4: a single-vector pass reads its task in address order and the hardware prefetcher follows
  it, while software prefetches only slow it (a TinyLlama-shaped model's Q4_0 matrices, one vector:
  16.9 ms a step with none against 19.4 at 4096 bytes ahead). Passes of 4 vectors read a block twice
  and need the software prefetch, the farther the better up to 64 KiB (Q4_0 at 8 vectors: 40.2 ms
  with none, 29.0 at 4096, 27.5 at 65536). Q6_K's single-vector pass wanted 64 KiB too while it read
  each quarter's three words 512 bytes apart (12 Q6_K 5632x2048 matrices: 16.7 GB/s with none, 26.6 at
  65536); its words now lie in the order it reads them (repack layout 7 on), and with none it streams
  34-36 GB/s (alternating runs) against 23-26 for the old layout at 64 KiB. Q5_K's single-vector pass
  read two streams (its quant words and, on the first pair, its qh words behind them) and wanted 64
  KiB at every batch size; since its qh words stand before the quant words (layout 9) it reads in
  address order too and wants none (5632x2048, Zen 3: 0.62-0.65 ms at 64 KiB with the old layout,
  0.57-0.58 with none and the new).
"""

import functools

import llvmlite.binding as llb

from pantheon.engine.kernels.simd import PREFETCH_BYTES

# Bytes ahead, where no measurement says otherwise: what the zero-copy kernels use (measured on the Xeon).
DEFAULT_AHEAD = PREFETCH_BYTES
# Bytes ahead on Zen, where a kernel's passes do not read their stream in address order.
ZEN_AHEAD = 65536


@functools.cache
def prefetch_ahead(qtype, n, cpu=None):
    """Bytes ahead of its reads that a repacked `qtype` kernel over `n` vectors asks for its weight stream
    (0: none, the hardware prefetcher's alone) on this host, or on the one llvm names `cpu`. Every type
    reads its blocks in address order since repack layout 9, so none has a distance of its own now."""
    name = cpu if cpu is not None else llb.get_host_cpu_name()
    if not name.startswith("znver"):
        return DEFAULT_AHEAD
    return 0 if n < 4 else ZEN_AHEAD
