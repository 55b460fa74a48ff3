import pytest

from ipc.errors import LayoutError
from ipc.ring import HEADER_SIZE, INVALID, U64, WRITING, Ring, ring_bytes


def make(nslots=4, slot_size=128, start=0):
    buf = memoryview(bytearray(ring_bytes(nslots, slot_size)))
    return buf, Ring(buf, nslots, slot_size, start)


@pytest.mark.parametrize("nslots, slot_size, start", [
    (3, 128, 0), (1, 128, 0), (4, 100, 0), (4, 64, 0), (4, 128, -1), (4, 128, 2**62)])
def test_bad_geometry(nslots, slot_size, start):
    with pytest.raises(LayoutError):
        Ring(memoryview(bytearray(1 << 16)), nslots, slot_size, start)


def test_attach_checks_header():
    buf, _ = make()
    Ring(buf, 4, 128, 0, format=False)
    with pytest.raises(LayoutError, match="does not match"):
        Ring(buf, 2, 128, 0, format=False)
    with pytest.raises(LayoutError, match="bytes < ring"):
        Ring(buf, 8, 128, 0, format=False)


def test_format_never_leaves_a_valid_looking_slot():
    # fresh shared memory is zeros; with start 0 a zero slot would look committed
    buf, ring = make(start=0)
    ring.adopt_consumer()
    assert ring.peek() == -1
    assert U64.unpack_from(buf, HEADER_SIZE)[0] == INVALID


def test_commit_last_and_wrap_near_2_32():
    start = 2**32 - 3
    buf, prod = make(start=start)
    cons = Ring(buf, 4, 128, start, format=False)
    prod.adopt_producer()
    cons.adopt_consumer()
    for _ in range(3):
        for i in range(4):
            assert prod.has_space()
            off = prod.begin()
            if i == 0:
                assert cons.peek() == -1  # begun, not committed: invisible
            prod.commit(off)
        assert not prod.has_space()
        for _ in range(4):
            assert cons.peek() >= 0
            cons.release()
        assert cons.peek() == -1
    assert cons.rseq == start + 12 > 2**32


def test_writing_mark_is_invisible_to_consumer_and_visible_to_owner():
    buf, prod = make()
    cons = Ring(buf, 4, 128, 0, format=False)
    prod.adopt_producer()
    cons.adopt_consumer()
    prod.commit(prod.begin())
    prod.begin()  # producer "dies" here
    assert cons.peek() >= 0
    cons.release()
    assert cons.peek() == -1
    info = prod.inspect()
    assert info["torn_seq"] == 1 and info["next_write_seq"] == 1
    heir = Ring(buf, 4, 128, 0, format=False)
    heir.adopt_producer()
    assert heir.wseq == 1
    heir.commit(heir.begin())
    assert cons.peek() >= 0 and U64.unpack_from(buf, cons.peek())[0] & WRITING == 0


def test_generation_bump():
    _, ring = make()
    assert ring.generation == 0
    assert ring.bump_generation() == 1
    assert ring.inspect()["generation"] == 1
