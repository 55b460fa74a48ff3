"""Speed for numba's CUDA simulator on one-thread blocks, the geometry the engine uses there (CI, no GPU).

The simulator runs each CUDA thread as a Python thread while the launching thread polls for
barriers, and wraps every array argument in two proxy objects. For a block of one thread neither is
needed: the patched launcher joins the block's single thread instead of polling, a barrier in a
one-thread block returns at once, and kernels index the (already copied) device-side numpy arrays
directly. Blocks of several threads keep the simulator's own code, barrier semantics included.
"""

_installed = []


def install():
    """Patch the simulator once per process; a no-op when it is already patched."""
    if _installed:
        return
    from numba.cuda.simulator import kernel as sim

    run_block, sync = sim.BlockManager.run, sim.BlockThread.syncthreads

    def run(self, grid_point, *args):
        if tuple(self._block_dim) != (1, 1, 1):
            return run_block(self, grid_point, *args)
        t = sim.BlockThread(lambda: self._f(*args), self, grid_point, (0, 0, 0), self._debug)
        t.start()
        t.join()
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])

    def syncthreads(self):
        if tuple(self._manager._block_dim) != (1, 1, 1):
            sync(self)

    sim.BlockManager.run = run
    sim.BlockThread.syncthreads = syncthreads
    sim.FakeWithinKernelCUDAArray = _unwrapped
    _installed.append(True)


def _unwrapped(fake):
    """The numpy array behind a simulator device array (what a kernel of one thread may index directly)."""
    return fake._ary
