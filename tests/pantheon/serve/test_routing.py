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


def test_prefix_key_covers_the_leading_full_blocks_only():
    from pantheon.serve.routing import prefix_key

    system = list(range(100, 164))  # four full blocks
    assert prefix_key(system + [1, 2, 3], block=16) == prefix_key(system + [9] * 40, block=16) != 0
    assert prefix_key(system, block=16) != prefix_key([7] + system[1:], block=16)
    assert prefix_key(list(range(15)), block=16) == 0  # no full block: nothing worth following
    assert prefix_key(list(range(20)), block=16) == prefix_key(list(range(16)) + [0] * 5, block=16)
