"""Work stealing: every task handed out exactly once, whoever runs it and however many threads really run."""

import numba
import numpy as np
import pytest
from numba import njit, prange

from pantheon.engine.kernels.steal import LINE, claim, counters, fetch_add, run_of


@njit(parallel=True, cache=False)
def _hand_out(tasks, workers, spin, seen, by):
    """seen[t]: how often task t was handed out; by[t]: the worker that ran it. Worker 0 spins per task, so
    the others finish their runs early and steal from its back end."""
    per = -(-tasks // workers)
    cnt = counters(workers)
    sink = np.zeros(workers, np.int64)  # [workers] the spin's sums, kept so the spin is not optimized out
    for wk in prange(workers):
        for j in range(workers):
            s = (wk + j) % workers
            lo, hi = run_of(s, per, tasks)
            taken, t = 0, claim(cnt, s, j == 0, lo, hi, 0)
            while t >= 0:
                for k in range(spin if wk == 0 else 0):
                    sink[wk] += k % 7
                fetch_add(seen, t, 1)
                by[t] = wk
                taken += 1
                t = claim(cnt, s, j == 0, lo, hi, taken)


@njit(cache=False)
def _adds(a, i, v):
    return fetch_add(a, i, v), fetch_add(a, i, v)


def test_fetch_add_returns_the_old_value():
    a = np.zeros(LINE, np.int64)
    assert _adds(a, 3, 5) == (0, 5)
    assert a[3] == 10 and a.sum() == 10


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
@pytest.mark.parametrize("tasks", [0, 1, 2, 5, 8, 37, 200])
def test_every_task_is_handed_out_once(tasks, workers):
    seen, by = np.zeros(tasks, np.int64), np.full(tasks, -1, np.int64)
    _hand_out(tasks, workers, 0, seen, by)
    assert (seen == 1).all()


def test_a_slow_worker_s_run_is_finished_by_the_others_from_its_back_end():
    numba.set_num_threads(2)
    seen, by = np.zeros(200, np.int64), np.full(200, -1, np.int64)
    _hand_out(200, 2, 200_000, seen, by)
    assert (seen == 1).all()
    mine = np.flatnonzero(by[:100] == 0)
    assert mine.size < 100 and (by[:100] == 1).any()  # worker 1 took some of worker 0's run
    assert (mine == np.arange(mine.size)).all()  # the owner read its run's front, in order
    assert (by[100:] == 1).all()


def test_fewer_threads_than_workers_still_run_every_task():
    numba.set_num_threads(1)  # prange's iterations then run one after another on one thread
    try:
        seen, by = np.zeros(50, np.int64), np.full(50, -1, np.int64)
        _hand_out(50, 3, 0, seen, by)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert (seen == 1).all()
    assert (by == 0).all()  # the first iteration owned its run and stole the other two
