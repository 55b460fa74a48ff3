"""Times the CPU matmul kernels on TinyLlama shapes: float gemv at 1 and 4 vectors, 128-row matmul, int8 qmatmul.

Usage: python benchmarks/bench_kernels.py [--types Q4_0,Q8_0] [--threads 1,2] [--reps 15]
Prints a table of medians (ms, and GB/s of weight bytes streamed), then one JSON object as the last line.
"""

import argparse
import json
import statistics
import time

import numba
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from threadpoolctl import threadpool_limits

from pantheon.engine.kernels import matmul as mm
from pantheon.engine.kernels import q8dot
from pantheon.engine.kernels.registry import kernels_for, supported_types
from pantheon.engine.weights import Weight

# (rows, cols) of TinyLlama-1.1B's attention (q, o), ffn_gate/ffn_up and ffn_down matrices.
SHAPES = ((2048, 2048), (5632, 2048), (2048, 5632))
DEFAULT_TYPES = ("Q4_0", "Q8_0")


def random_weight(qtype, rows, cols, rng):
    """Random blocks with every fp16 scale (and min) set to a sane finite value."""
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
        w = rng.standard_normal((rows, cols), dtype=np.float32)  # [rows, cols]
        raw = {GGMLQuantizationType.F32: w.view(np.uint8), GGMLQuantizationType.F16: w.astype(np.float16).view(np.uint8),
               GGMLQuantizationType.BF16: (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)}[qtype]
        return Weight(qtype.name, qtype, rows, cols, np.ascontiguousarray(raw))
    raw = rng.integers(0, 256, (rows, cols // block_elems, block_bytes), dtype=np.uint8)  # [rows, nb, bb]
    if block_elems == 32:
        nscales = 2 if qtype in (GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q5_1) else 1
        scales = rng.uniform(-0.01, 0.01, (rows, cols // 32, nscales)).astype(np.float16)  # [rows, nb, k]
        raw[:, :, : 2 * nscales] = scales.view(np.uint8)
    else:
        # K-quants: the super-block d (and dmin) sit at the end; timing does not care about their value.
        raw[:, :, -4:] = np.full((rows, cols // block_elems, 2), 0.01, np.float16).view(np.uint8)
    return Weight(qtype.name, qtype, rows, cols, raw.reshape(rows, -1))


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench_type(qtype, threads, reps, rng):
    rows_out = []
    for rows, cols in SHAPES:
        w = random_weight(qtype, rows, cols, rng)
        k = kernels_for(qtype)
        mbytes = w.raw.nbytes / 1e6
        for n in (1, 4):
            x = rng.standard_normal((n, cols), dtype=np.float32)  # [n, cols]
            out = np.empty((n, rows), np.float32)  # [n, rows]
            ms = median_ms(lambda: k.gemv(w.raw, x, out), reps)
            rows_out.append(dict(type=qtype.name, threads=threads, op=f"gemv n={n}", shape=f"{rows}x{cols}",
                                 ms=round(ms, 4), gbps=round(mbytes / ms, 2)))
        x = rng.standard_normal((128, cols), dtype=np.float32)  # [128, cols]
        ms = median_ms(lambda: mm.matmul(w, x), max(3, reps // 3))
        rows_out.append(dict(type=qtype.name, threads=threads, op="matmul n=128", shape=f"{rows}x{cols}",
                             ms=round(ms, 3), gbps=round(mbytes / ms, 2)))
        if q8dot.supports(qtype):
            for n in (1, 128):  # the int8-activation path the model takes (activation rounding included)
                ms = median_ms(lambda: mm.qmatmul([w], x[:n]), reps if n == 1 else max(3, reps // 3))
                rows_out.append(dict(type=qtype.name, threads=threads, op=f"qmatmul n={n}", shape=f"{rows}x{cols}",
                                     ms=round(ms, 4), gbps=round(mbytes / ms, 2)))
    return rows_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default=None, help="comma-separated ggml type names (default: Q4_0,Q8_0 then all supported)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    names = args.types.split(",") if args.types else list(DEFAULT_TYPES) + sorted(
        t.name for t in supported_types() if t.name not in DEFAULT_TYPES)
    rng = np.random.default_rng(0)
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        numba.set_num_threads(threads)
        with threadpool_limits(limits=threads):
            for name in names:
                try:
                    results += bench_type(GGMLQuantizationType[name], threads, args.reps, rng)
                except Exception as e:  # a type the registry cannot serve yet: report and move on
                    print(f"skip {name}: {type(e).__name__}: {e}")
    print(f"{'type':6} {'thr':>3} {'op':13} {'shape':10} {'ms':>9} {'GB/s':>7}")
    for r in results:
        print(f"{r['type']:6} {r['threads']:>3} {r['op']:13} {r['shape']:10} {r['ms']:>9.3f} {r['gbps']:>7.2f}")
    print(json.dumps(dict(gemv_max_batch=mm.GEMV_MAX_BATCH, tile_bytes=mm.TILE_BYTES, dequant_threads=mm.DEQUANT_THREADS, results=results)))


if __name__ == "__main__":
    main()
