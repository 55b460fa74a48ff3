"""The CUDA stack of one device: CuPy arrays, cuBLAS and streams on a GPU; numpy under numba's CUDA simulator.

Everything that computes is a numba @cuda.jit kernel of this package; this shim only allocates,
copies, and runs the one product it does not write itself (fp16 x fp16 with fp32 accumulation:
cuBLAS through CuPy on a GPU, numpy in the simulator, both rounding the result to fp16).
"""

import contextlib
from dataclasses import dataclass

import numpy as np

from pantheon.engine.cuda import compat
from pantheon.errors import UnsupportedDevice


@dataclass(frozen=True)
class Geometry:
    """Launch shapes: lanes per weight row and rows per block (matrix-vector), threads per block elsewhere."""

    lanes: int
    rows: int
    threads: int
    max_grid: int

    def grid(self, items, per_block):
        return max(1, min(self.max_grid, -(-items // per_block)))


VIEW_CACHE = 4096  # numba views of CuPy arrays kept for launches: a model's weights, workspaces and pool
# 16 lanes x 8 rows: the fastest decode geometry on an H200 over Q4_0/Q8_0/Q4_K/Q6_K (docs/performance.md)
GPU_GEOMETRY = Geometry(lanes=16, rows=8, threads=256, max_grid=1 << 16)
# The simulator runs every CUDA thread as a Python thread: one thread, grid-strided, is fastest there.
SIM_GEOMETRY = Geometry(lanes=1, rows=1, threads=1, max_grid=1)


def simulated():
    """Whether numba runs CUDA kernels in its simulator (NUMBA_ENABLE_CUDASIM=1 before numba's import)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class Backend:
    """One device: allocation, host/device copies, the fp16 product, kernel launches on its stream."""

    def __init__(self, ordinal, xp, cuda, stream=None, geometry=None):
        self.ordinal, self.xp, self.cuda = ordinal, xp, cuda
        self.stream = stream
        self.sim = xp is np
        self.geometry = geometry or (SIM_GEOMETRY if self.sim else GPU_GEOMETRY)
        self._nb_stream = cuda.external_stream(stream.ptr) if stream is not None else 0
        self._views = {}  # (pointer, shape, strides, dtype) -> numba device array over that memory
        self.launches = 0
        self._tape = None  # while a step is captured: the simulator's list of launches (True on a GPU)

    def activate(self):
        """Make this device current for CuPy allocations (no-op in the simulator)."""
        if not self.sim:
            self.xp.cuda.Device(self.ordinal).use()
            self.cuda.select_device(self.ordinal)

    def launch(self, kernel, grid, block):
        """`kernel` configured for this device's stream; while the simulator captures, a recorder of the call."""
        self.launches += 1  # Python-side launches: a benchmark states them per decode step
        if not self.sim:
            configured = kernel[grid, block, self._nb_stream]
            return lambda *args: configured(*[self._view(a) if isinstance(a, self.xp.ndarray) else a for a in args])
        configured = kernel[grid, block]
        if self._tape is None:
            return configured
        return lambda *args: self._tape.append((configured, args))

    def capture(self, body):
        """Record the kernels body() launches, without running them; returns replay(), which runs them again
        with the same arguments (so inputs go through arrays body() was given, not through scalars).

        On a GPU this is a CUDA graph of this device's stream; in the simulator a tape of the configured
        kernels. Either way body() must only launch: anything that allocates or copies is refused."""
        if self.sim:
            self._tape = tape = []
            try:
                body()
            finally:
                self._tape = None
            return lambda: [kernel(*args) for kernel, args in tape]
        self._tape = True
        self.stream.begin_capture()
        try:
            body()
        except BaseException:
            self._abandon_capture()
            raise
        finally:
            self._tape = None
        graph = self.stream.end_capture()
        return lambda: graph.launch(self.stream)

    def _view(self, arr):
        """A numba device array over CuPy array `arr`'s memory, made once per (pointer, shape, strides, dtype).

        numba-cuda imports a CuPy argument through DLPack at every launch, and CuPy answers by making the
        launch stream wait on an event of its own: tens of microseconds a launch, and a stream capture
        fails on it (cudaErrorStreamCaptureIsolation). Its own device arrays pass straight through. A view
        keeps no reference to `arr` (a dropped array's memory is freed as usual); memory reused at the same
        address with the same shape is described by the same view, so the cache is only ever cleared to
        bound its size."""
        key = (arr.data.ptr, arr.shape, arr.strides, arr.dtype.char)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= VIEW_CACHE:
                self._views.clear()
            desc = arr.__cuda_array_interface__
            view = self._views[key] = self.cuda.from_cuda_array_interface(desc, owner=None, sync=False)
        return view

    def _abandon_capture(self):
        try:
            self.stream.end_capture()
        except Exception:  # the capture may already be invalidated: the body's error is the one to report
            pass

    def _not_capturing(self):
        assert self._tape is None, "a captured step may only launch kernels (it allocated or copied)"

    def write(self, dst, host):
        """dst[...] = numpy `host` (same shape): a step's inputs into the arrays its capture reads."""
        self._not_capturing()
        if self.sim:
            dst[...] = host
            return
        dst.set(np.ascontiguousarray(host, dtype=dst.dtype), stream=self.stream)

    def upload(self, host):
        """A device copy of the numpy array `host`."""
        self._not_capturing()
        if self.sim:
            return np.array(host, copy=True)
        self.activate()
        with self.stream:
            return self.xp.asarray(host)

    def to_host(self, arr):
        self._not_capturing()
        if self.sim:
            return np.array(arr)  # a copy, as from a device: the caller may keep it while arr is reused
        host = self.xp.asnumpy(arr, stream=self.stream)
        self.stream.synchronize()
        return host

    def take(self, arr):
        """`arr` from another device of this process, copied onto this one."""
        self._not_capturing()
        if self.sim:
            return arr
        self.activate()
        with self.stream:
            return arr.copy()  # CuPy copies onto the current device, wherever arr lives

    def write_from(self, dst, src):
        """dst[...] = src, a device array of this process, possibly on another device."""
        if self.sim:
            self._not_capturing()
            dst[...] = src
            return
        copied = self.take(src)  # [same shape] on this device
        with self.stream:
            dst[...] = copied

    def empty(self, shape, dtype=np.float32):
        self._not_capturing()
        if self.sim:
            return np.empty(shape, dtype)
        with self.stream:
            return self.xp.empty(shape, dtype)

    def copy_within(self, arr, dst, src):
        """arr[dst] = arr[src] on the device, queued behind this stream's kernels (index tuples)."""
        self._not_capturing()
        if self.sim:
            arr[dst] = arr[src]
            return
        self.activate()
        with self.stream:
            arr[dst] = arr[src]

    def zeros(self, shape, dtype=np.float32):
        self._not_capturing()
        if self.sim:
            return np.zeros(shape, dtype)
        with self.stream:
            return self.xp.zeros(shape, dtype)

    def matmul_t(self, a16, b16, out):
        """out float32 [n, m] = fp16(a16 [n, k] @ b16 [m, k].T), accumulated in fp32."""
        self._not_capturing()
        if self.sim:
            out[...] = (a16.astype(np.float32) @ b16.astype(np.float32).T).astype(np.float16)  # [n, m]
        else:
            with self.stream:
                out[...] = self.xp.matmul(a16, b16.T)  # [n, m] cuBLAS, fp16 in and out, fp32 compute

    def half(self, x):
        """fp16 copy of float32 x (the activations of the tile path)."""
        self._not_capturing()
        if self.sim:
            return x.astype(np.float16)  # [...]
        with self.stream:
            return x.astype(self.xp.float16)  # [...]

    def context(self):
        """Where this device's CuPy operations run: its stream (nothing to enter in the simulator)."""
        self._not_capturing()
        if self.sim:
            return contextlib.nullcontext()
        self.activate()
        return self.stream

    def synchronize(self):
        if not self.sim:
            self.stream.synchronize()

    def memory(self):
        """(free, total) bytes of the device, or None in the simulator."""
        if self.sim:
            return None
        return self.xp.cuda.runtime.memGetInfo()

    def release(self):
        """Return cached blocks of CuPy's pool to the driver (after the model's arrays are dropped)."""
        if not self.sim:
            self.synchronize()
            self.xp.get_default_memory_pool().free_all_blocks()


def open_backend(ordinal):
    """The backend of CUDA ordinal `ordinal` (relative to CUDA_VISIBLE_DEVICES); UnsupportedDevice
    naming what is missing when the CUDA stack (numba-cuda, CuPy, driver, device) is not usable."""
    try:
        from numba import config, cuda
    except ImportError as e:
        raise UnsupportedDevice(f"cuda{ordinal}: numba is not installed ({e})") from None
    compat.numpy_aliases()
    if config.ENABLE_CUDASIM:
        from pantheon.engine.cuda import simfast

        simfast.install()
        return Backend(ordinal, np, cuda)
    try:
        import cupy
    except ImportError as e:
        raise UnsupportedDevice(f"cuda{ordinal}: CuPy is not installed ({e}); install pantheon[gpu]") from None
    try:
        config.CUDA_ARRAY_INTERFACE_SYNC = False  # ordering comes from launching on one stream
        cupy.cuda.Device(ordinal).use()
        cuda.select_device(ordinal)
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.use()  # CuPy's own operations (copies, indexing, cuBLAS) queue behind our kernels on this device
        return Backend(ordinal, cupy, cuda, stream=stream)
    except Exception as e:  # driver missing, ordinal out of range, no kernel image: the die is refused
        why = f"{type(e).__name__}: {e}"
        raise UnsupportedDevice(f"cuda{ordinal}: the CUDA stack cannot use this device: {why}") from None
