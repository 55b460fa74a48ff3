"""numba-cuda keeps compiling where numpy has dropped an alias it registers (numpy 2.5's np.row_stack)."""

import numpy as np

from pantheon.engine.cuda import compat
from pantheon.engine.cuda.backend import open_backend


def test_row_stack_is_restored_as_vstack_where_numpy_removed_it(monkeypatch):
    monkeypatch.delattr(np, "row_stack", raising=False)
    compat.numpy_aliases()
    assert np.row_stack is np.vstack


def test_an_existing_row_stack_is_left_alone(monkeypatch):
    mine = object()
    monkeypatch.setattr(np, "row_stack", mine, raising=False)
    compat.numpy_aliases()
    assert np.row_stack is mine


def test_opening_a_device_restores_it_before_any_kernel_compiles(monkeypatch):
    monkeypatch.delattr(np, "row_stack", raising=False)
    open_backend(0)
    assert np.row_stack is np.vstack
