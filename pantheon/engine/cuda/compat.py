"""Keeps numba-cuda compiling under numpy releases newer than it knows: the one alias numpy 2.5 removed."""

import numpy as np


def numpy_aliases():
    """Restore np.row_stack (numpy's alias of np.vstack until 2.5). numba-cuda up to 0.30.4 registers a kernel
    overload of it while loading its typing registries, at the first compile, so without the alias no kernel
    compiles ("module 'numpy' has no attribute 'row_stack'", seen on an H200 image with numpy 2.5.2)."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
