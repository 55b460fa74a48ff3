"""A GPU backend hands its kernels numba views of CuPy arrays, made once per memory layout (a stand-in CuPy and
numba here: the real pair is exercised by benchmarks/gpu_check.sh on a device)."""

import types

import numpy as np

from pantheon.engine.cuda import backend as backend_mod
from pantheon.engine.cuda.backend import Backend


class FakeArray:
    """What the backend reads of a CuPy array: its pointer, shape, strides, dtype and array interface."""

    def __init__(self, ptr, shape, dtype=np.float32):
        self.data = types.SimpleNamespace(ptr=ptr)
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.strides = tuple(int(s) for s in np.empty(shape, dtype).strides)

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.data.ptr, False), "shape": self.shape, "typestr": self.dtype.str, "version": 3}


class FakeCuda:
    """numba.cuda's two entry points the backend uses: external streams and views of foreign arrays."""

    def __init__(self):
        self.imported = []

    def external_stream(self, ptr):
        return ("stream", ptr)

    def from_cuda_array_interface(self, desc, owner=None, sync=True):
        assert owner is None and sync is False  # no reference kept, no stream synchronisation at import
        self.imported.append(desc["data"][0])
        return ("view", desc["data"][0], desc["shape"])


class FakeKernel:
    def __init__(self):
        self.calls = []

    def __getitem__(self, config):
        return lambda *args: self.calls.append((config, args))


def _backend():
    xp = types.SimpleNamespace(ndarray=FakeArray)
    return Backend(0, xp, FakeCuda(), stream=types.SimpleNamespace(ptr=77))


def test_cupy_arguments_reach_the_kernel_as_cached_numba_views_and_scalars_as_they_are():
    b, kernel = _backend(), FakeKernel()
    x, y = FakeArray(4096, (2, 8)), FakeArray(8192, (8,))
    b.launch(kernel, 3, 32)(x, 5, y)
    b.launch(kernel, 3, 32)(FakeArray(4096, (2, 8)), 6, y)  # another array object over the same memory
    (config, first), (_, second) = kernel.calls
    assert config == (3, 32, ("stream", 77))
    assert first == (("view", 4096, (2, 8)), 5, ("view", 8192, (8,)))
    assert second[0] is first[0] and second[2] is first[2] and second[1] == 6
    assert b.cuda.imported == [4096, 8192]


def test_another_shape_at_the_same_address_is_another_view():
    b, kernel = _backend(), FakeKernel()
    b.launch(kernel, 1, 1)(FakeArray(4096, (2, 8)))
    b.launch(kernel, 1, 1)(FakeArray(4096, (16,)))
    b.launch(kernel, 1, 1)(FakeArray(4096, (16,), np.int32))
    assert [args[0][2] for _, args in kernel.calls] == [(2, 8), (16,), (16,)]
    assert len(b.cuda.imported) == 3


def test_the_view_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(backend_mod, "VIEW_CACHE", 4)
    b, kernel = _backend(), FakeKernel()
    for ptr in range(10):
        b.launch(kernel, 1, 1)(FakeArray(4096 * (ptr + 1), (4,)))
    assert len(b._views) <= 4 and len(kernel.calls) == 10
