"""Helpers for GPU-engine tests: a backend of the simulator (or the real device) with a chosen launch geometry."""

import numpy as np
import pytest

from pantheon.engine.cuda.backend import Geometry, open_backend

# several lanes per row, rows per block, threads per block and blocks: exercises the shared-memory
# reductions and the grid-stride loops that a one-thread launch never takes
WIDE = Geometry(lanes=4, rows=2, threads=4, max_grid=3)


def backend(geometry=None):
    """Device 0 with `geometry` (default: the backend's own: one thread in the simulator, full size on a GPU)."""
    b = open_backend(0)
    if geometry is not None and b.sim:
        b.geometry = geometry
    return b


def need_devices(n):
    """Skip unless `n` CUDA ordinals can be opened (the simulator has any number; an H200 machine may have one)."""
    from pantheon.engine.cuda.backend import simulated

    if simulated():
        return
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < n:
        pytest.skip(f"needs {n} CUDA devices")


def golden_weight(name, qtype, rows):
    """The first `rows` rows of the first 2-D tensor of `qtype` in ../shared/golden/`name`.gguf, or skip."""
    from pantheon.engine.weights import Weight
    from tests.conftest import shared_path

    w = golden_matrix(shared_path("golden", f"{name}.gguf"), qtype)
    return Weight(w.name, w.qtype, rows, w.cols, w.raw[:rows])


def golden_matrix(path, qtype):
    """The first 2-D tensor of `qtype` in the GGUF at `path`, as a Weight, or skip."""
    from pantheon.engine.weights import Weight
    from pantheon.gguf.file import open_gguf

    g = open_gguf(str(path))
    for name, t in g.tensors.items():
        if len(t.shape) == 2 and int(t.qtype) == qtype:
            raw = np.asarray(t.raw).reshape(t.shape[0], -1)  # [rows, row_bytes]
            return Weight(name, qtype, t.shape[0], t.shape[1], raw)
    pytest.skip(f"no tensor of type {qtype} in {path}")
