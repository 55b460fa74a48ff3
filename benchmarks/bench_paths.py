"""Weight-stream rate of each CPU product path of a type: repacked, rows in place, AVX2-only family, float.

Usage: python benchmarks/bench_paths.py [--types Q4_0,Q8_0,Q4_K,Q6_K] [--matrices 12] [--vectors 1]
                                        [--threads 2] [--reps 7]

Each path multiplies --matrices random 5632x2048 matrices (12 of them are more than a 32 MiB L3, so
their bytes come from DRAM as a decode step's do; --matrices 1 measures from cache) by the same
--vectors vectors. Paths: `repacked` (the sidecar's layout, engine.repacked), `in_place` (the same
family on the file's rows), `avx2` (K-quants' AVX2-only family, q8k._product_avx2) and `float` (the
exact float kernel); a path this host cannot run is left out. The paths run alternately, --reps
rounds; medians. Prints a table (ms per matrix, GB/s of weight bytes), then one JSON object as the
last line.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.bench_kernels import random_weight  # noqa: E402
from pantheon.engine.kernels import matmul as mm  # noqa: E402
from pantheon.engine.kernels import q8dot, q8k, repack  # noqa: E402
from pantheon.engine.kernels.avx2 import has_avx2  # noqa: E402
from pantheon.engine.kernels.vnni import has_int8_dots  # noqa: E402

ROWS, COLS = 5632, 2048
K_QUANTS = (T.Q4_K, T.Q5_K, T.Q6_K)


def _paths(qtype, weights, x):
    """name -> a callable multiplying every weight by x, for each path this host runs for `qtype`."""
    kq = qtype in K_QUANTS
    family = q8k if kq else q8dot
    paths = {"float": lambda: [mm.matmul(w, x) for w in weights]}
    if not has_int8_dots():
        return paths
    acts = q8k.activations(x) if kq else q8dot.Activations(x)
    out = np.empty((len(x), ROWS), np.float32)  # [n, rows]
    packs = [repack.pack(qtype, w.raw) for w in weights]
    paths["repacked"] = lambda: [family.product_repacked(qtype, p, ROWS, acts, out) for p in packs]
    paths["in_place"] = lambda: [family.product(qtype, w.raw, acts, out) for w in weights]
    if kq and has_avx2():
        paths["avx2"] = lambda: [q8k._product_avx2(qtype, w.raw, acts, out) for w in weights]
    return paths


def bench_type(qtype, matrices, vectors, reps, rng):
    """One row per path: median seconds of a pass over every matrix, as ms per matrix and GB/s."""
    weights = [random_weight(qtype, ROWS, COLS, rng) for _ in range(matrices)]
    x = rng.standard_normal((vectors, COLS)).astype(np.float32)  # [n, cols]
    paths = _paths(qtype, weights, x)
    times = {name: [] for name in paths}
    for fn in paths.values():
        fn()  # compile, and the first touch of every page
    for _ in range(reps):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    nbytes = sum(w.raw.nbytes for w in weights)
    return [dict(type=qtype.name, path=name, ms_per_matrix=round(statistics.median(ts) * 1e3 / matrices, 4),
                 gb_s=round(nbytes / statistics.median(ts) / 1e9, 2)) for name, ts in times.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_0,Q8_0,Q4_K,Q6_K")
    ap.add_argument("--matrices", type=int, default=12)
    ap.add_argument("--vectors", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    numba.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    for name in args.types.split(","):
        rows += bench_type(T[name], args.matrices, args.vectors, args.reps, rng)
    print(f"{args.matrices} matrices {ROWS}x{COLS}, {args.vectors} vector(s), {args.threads} threads")
    print(f"{'type':6s} {'path':9s} {'ms/matrix':>10s} {'GB/s':>7s}")
    for r in rows:
        print(f"{r['type']:6s} {r['path']:9s} {r['ms_per_matrix']:10.3f} {r['gb_s']:7.1f}")
    print(json.dumps(dict(matrices=args.matrices, vectors=args.vectors, threads=args.threads, results=rows)))


if __name__ == "__main__":
    main()
