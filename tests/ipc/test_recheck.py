"""The re-check interval: short after traffic, doubling to its cap while idle, cut by a deadline."""

import pytest

from ipc.recheck import Recheck


def test_doubles_to_the_cap_while_idle_and_resets_on_traffic():
    r = Recheck(0.02, 0.1)
    seen = []
    for _ in range(5):
        seen.append(r.wait(0.0, None))
        r.empty()
    assert seen == [0.02, 0.04, 0.08, 0.1, 0.1]
    r.traffic()
    assert r.wait(0.0, None) == 0.02


def test_a_deadline_cuts_the_wait_short():
    r = Recheck(0.02, 0.1)
    assert r.wait(10.0, 10.005) == pytest.approx(0.005)
    assert r.wait(10.0, 11.0) == 0.02


@pytest.mark.parametrize("base, cap", [(0.0, 0.1), (-1.0, 0.1), (0.2, 0.1)])
def test_bad_intervals_are_refused(base, cap):
    with pytest.raises(ValueError, match="recheck_s"):
        Recheck(base, cap)
