"""The engine's thread budget: numba's prange threads and BLAS threads held to the cores it was given."""

import numba
from threadpoolctl import ThreadpoolController

_CONTROLLER = None


def _controller():
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


class ThreadBudget:
    """Context manager: inside it, kernels and BLAS use at most `n` threads."""

    def __init__(self, n):
        if n < 1:
            raise ValueError(f"threads must be at least 1, got {n}")
        self.n = n
        self._limit = None

    def __enter__(self):
        numba.set_num_threads(min(self.n, numba.config.NUMBA_NUM_THREADS))
        self._limit = _controller().limit(limits=self.n, user_api="blas")
        return self

    def __exit__(self, *exc):
        self._limit.restore_original_limits()
        return False
