"""Replica policy: least-busy spreading, session affinity kept unless clearly busier."""

from pantheon.serve.routing import SessionMap, pick_replica


def test_least_busy_spreads():
    load = {}
    picks = []
    for _ in range(4):
        d = pick_replica([0, 1], load)
        load[d] = load.get(d, 0) + 1
        picks.append(d)
    assert sorted(picks) == [0, 0, 1, 1]


def test_affinity_kept_when_not_clearly_busier():
    assert pick_replica([0, 1], {0: 2, 1: 1}, preferred=0) == 0
    assert pick_replica([0, 1], {0: 1, 1: 0}, preferred=0) == 0


def test_affinity_dropped_when_clearly_busier():
    assert pick_replica([0, 1], {0: 3, 1: 1}, preferred=0) == 1
    assert pick_replica([0, 1], {0: 5, 1: 0}, preferred=0) == 1


def test_affinity_to_dead_replica_ignored():
    assert pick_replica([1], {0: 0, 1: 4}, preferred=0) == 1


def test_session_map_lru_and_forget():
    m = SessionMap(capacity=2)
    m.put(("a", 1), 0)
    m.put(("a", 2), 1)
    m.get(("a", 1))
    m.put(("a", 3), 1)
    assert m.get(("a", 2)) is None and m.get(("a", 1)) == 0
    m.forget_die(1)
    assert m.get(("a", 3)) is None
