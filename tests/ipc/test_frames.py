import pytest

from ipc import frames
from ipc.errors import FrameError
from ipc.frames import MAGIC, VERSION
from tests.ipc.kinds import Kind


def test_header_is_fixed_32_bytes():
    assert frames.HEADER_SIZE == 32


def test_kind_is_any_byte_but_zero():
    """The transport does not read kinds (workers/protocol.py does); 0 marks a slot never written."""
    assert frames.KINDS == set(range(1, 256))


@pytest.mark.parametrize("field, args, msg", [
    ("magic", (0x1234, VERSION, 3, 3, 0, 0), "magic"),
    ("version", (MAGIC, VERSION + 1, 3, 3, 0, 0), "version"),
    ("kind", (MAGIC, VERSION, 0, 3, 0, 0), "kind"),
    ("flags", (MAGIC, VERSION, 3, 4, 0, 0), "flags"),
    ("frag", (MAGIC, VERSION, 3, 3, 101, 101), "slot capacity"),
    ("total", (MAGIC, VERSION, 3, 3, 0, 1001), "limit"),
])
def test_check_header_refuses(field, args, msg):
    with pytest.raises(FrameError, match=msg):
        frames.check_header(*args, frag_cap=100, max_message=1000)


def test_check_header_accepts_a_full_middle_fragment_and_nothing_past_the_limits():
    """A middle fragment (neither FIRST nor LAST) exactly at both limits passes; one byte more fails."""
    args = dict(frag_cap=100, max_message=1000)
    assert frames.check_header(MAGIC, VERSION, int(Kind.SUBMIT), 0, 100, 1000, **args) is None
    for frag_len, total in ((101, 1000), (100, 1001)):
        with pytest.raises(FrameError):
            frames.check_header(MAGIC, VERSION, int(Kind.SUBMIT), 0, frag_len, total, **args)


def test_check_ids_ranges():
    frames.check_ids(Kind.DONE, 2**64 - 1, 2**32 - 1, 2**32 - 1)
    for bad in [(0, 1, 0, 0), (256, 1, 0, 0), (Kind.DONE, -1, 0, 0), (Kind.DONE, 2**64, 0, 0),
                (Kind.DONE, 0, 2**32, 0), (Kind.DONE, 0, 0, -1)]:
        with pytest.raises(FrameError):
            frames.check_ids(*bad)


def test_fragment_count():
    assert frames.fragments(0, 100) == 1
    assert frames.fragments(100, 100) == 1
    assert frames.fragments(101, 100) == 2
