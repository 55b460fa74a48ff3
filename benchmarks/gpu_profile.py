"""Where a GPU step's time goes: device time per kernel (CUDA events around every launch) and the matrix-vector
kernels' bandwidth at several launch geometries. Run by gpu_bench.py on the device (--profile)."""

import time
from collections import defaultdict

import numpy as np

from benchmarks.gpu_model import random_matrix
from pantheon.engine.cuda.backend import Geometry
from pantheon.engine.cuda.ops import Activations
from pantheon.engine.cuda.qtypes import Q4_0, Q4_K, Q6_K, Q8_0

# (lanes per row, rows per block) tried for the decode kernels; lanes * rows <= matvec.MAX_THREADS
GEOMETRIES = ((32, 1), (32, 2), (32, 4), (32, 8), (16, 4), (16, 8), (16, 16), (8, 8), (8, 16), (8, 32), (4, 64))


class KernelClock:
    """Wraps a backend's launches and GEMMs so each is bracketed by two events on its stream."""

    def __init__(self, b):
        self.b, self.marks = b, []
        self._launch, self._matmul = b.launch, b.matmul_t

    def __enter__(self):
        self.b.launch = self._timed_launch
        self.b.matmul_t = lambda *a: self._around("cublas_matmul", self._matmul, a)
        return self

    def __exit__(self, *exc):
        self.b.launch, self.b.matmul_t = self._launch, self._matmul

    def _timed_launch(self, kernel, grid, block):
        run = self._launch(kernel, grid, block)
        name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "py_func", None), "__name__", "?")
        return lambda *args: self._around(name, run, args)

    def _stamp(self):
        """An event recorded on the stream (host time in the simulator, where launches run synchronously)."""
        if self.b.sim:
            return time.perf_counter()
        event = self.b.xp.cuda.Event()
        event.record(self.b.stream)
        return event

    def _elapsed_ms(self, start, end):
        return 1e3 * (end - start) if self.b.sim else self.b.xp.cuda.get_elapsed_time(start, end)

    def _around(self, name, fn, args):
        start = self._stamp()
        out = fn(*args)
        self.marks.append((name, start, self._stamp()))
        return out

    def table(self):
        """{kernel: [calls, milliseconds]} of the launches recorded so far (synchronises)."""
        self.b.synchronize()
        out = defaultdict(lambda: [0, 0.0])
        for name, start, end in self.marks:
            out[name][0] += 1
            out[name][1] += self._elapsed_ms(start, end)
        return {k: [n, round(ms, 4)] for k, (n, ms) in sorted(out.items(), key=lambda kv: -kv[1][1])}


def kernel_times(b, fn):
    """{kernel: [calls, ms]} of one call of fn, each launch timed on the device."""
    fn()
    b.synchronize()
    with KernelClock(b) as clock:
        fn()
    return clock.table()


def timed(b, fn, reps):
    """Seconds per call of fn after one warm-up, the device synchronised around the timed calls."""
    fn()
    b.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    b.synchronize()
    return (time.perf_counter() - t0) / reps


def geometry_sweep(b, ops, rows, cols, n=1):
    """{qtype name: {"int8"|"f32": {"LxR": GB/s}}}: one rows x cols matrix times n vectors, per geometry."""
    rng = np.random.default_rng(3)
    h = b.upload(rng.standard_normal((n, cols)).astype(np.float32))  # [n, cols]
    out = b.zeros((n, rows))  # [n, rows]
    report, keep = {}, (b.geometry, ops.g, ops.int8)
    try:
        for name, qtype in (("Q4_0", Q4_0), ("Q8_0", Q8_0), ("Q4_K", Q4_K), ("Q6_K", Q6_K)):
            mat = random_matrix(b, qtype, rows, cols, rng)
            report[name] = {tag: _sweep(b, ops, mat, h, out, int8) for tag, int8 in (("int8", True), ("f32", False))}
            del mat
    finally:
        b.geometry, ops.g, ops.int8 = keep
    return report


def _sweep(b, ops, mat, h, out, int8):
    ops.int8 = int8
    acts = Activations(ops, h)
    acts.q8() if int8 else acts.unit_major()
    rates = {}
    # the simulator runs each CUDA thread as a Python thread: one small geometry proves the code path there
    for lanes, per in ((1, 1),) if b.sim else GEOMETRIES:
        ops.g = b.geometry = Geometry(lanes=lanes, rows=per, threads=256, max_grid=1 if b.sim else 1 << 16)
        seconds = timed(b, lambda: ops.matvec(mat, acts, out), 1 if b.sim else 20)
        rates[f"{lanes}x{per}"] = round(mat.nbytes / seconds / 1e9, 1)
    return rates


def best_geometry(sweep, kind="int8"):
    """The (lanes, rows) whose GB/s over every type of the sweep has the highest geometric mean."""
    rates = [kinds[kind] for kinds in sweep.values()]
    score = {g: np.exp(np.mean([np.log(max(r[g], 1e-9)) for r in rates])) for g in rates[0]}
    lanes, per = max(score, key=score.get).split("x")
    return int(lanes), int(per)


def print_sweep(sweep):
    for qname, kinds in sweep.items():
        for tag, rates in kinds.items():
            best = max(rates, key=rates.get)
            print(f"  {qname:5} {tag:4} best {best:6} {rates[best]:7.1f} GB/s  " +
                  " ".join(f"{g}:{r:.0f}" for g, r in rates.items()))


def print_times(title, table):
    total = sum(ms for _, ms in table.values())
    print(f"{title}: {total:.2f} ms of kernels")
    for name, (calls, ms) in list(table.items())[:10]:
        print(f"  {name:16} {calls:5d} calls {ms:9.3f} ms {100 * ms / total:5.1f} %")

