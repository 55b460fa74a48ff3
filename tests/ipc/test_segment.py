import os

import posix_ipc
import pytest

from ipc.errors import SegmentError, ShmFull
from ipc.segment import PREFIX, SHM_DIR, Segment, owned_entries, reap_orphans
from tests.ipc.forking import fork, wait


def test_segment_leaves_no_name_and_is_shared_across_fork():
    before = owned_entries(os.getpid())
    seg = Segment(1 << 16)
    assert owned_entries(os.getpid()) == before
    seg.buf[:5] = b"hello"

    def child():
        assert bytes(seg.buf[:5]) == b"hello"
        seg.buf[5:10] = b"world"
    assert wait(fork(child)) == 0
    assert bytes(seg.buf[:10]) == b"helloworld"


def test_segment_is_reserved_not_sparse():
    seg = Segment(8 << 20)
    # every page allocated by posix_fallocate: writing the last byte cannot SIGBUS
    seg.buf[-1] = 7
    assert seg.buf[-1] == 7


def test_view_bounds_checked():
    seg = Segment(4096)
    assert len(seg.view(4000, 96)) == 96
    with pytest.raises(SegmentError, match="outside segment"):
        seg.view(4000, 97)
    with pytest.raises(SegmentError):
        Segment(0)


def test_full_dev_shm_fails_at_start_with_a_clear_message():
    st = os.statvfs(SHM_DIR)
    too_big = st.f_blocks * st.f_frsize + (1 << 30)
    with pytest.raises(ShmFull, match="shm-size"):
        Segment(too_big)
    assert owned_entries(os.getpid()) == []


def test_reap_orphans_removes_names_of_dead_pids_only():
    def leak():
        posix_ipc.SharedMemory(f"/{PREFIX}-{os.getpid()}-0badc0de", posix_ipc.O_CREX, size=64)
    pid = fork(leak)
    assert wait(pid) == 0
    assert owned_entries(pid) == [f"{PREFIX}-{pid}-0badc0de"]
    mine = posix_ipc.SharedMemory(f"/{PREFIX}-{os.getpid()}-a11ce", posix_ipc.O_CREX, size=64)
    try:
        removed = reap_orphans()
        assert f"{PREFIX}-{pid}-0badc0de" in removed
        assert owned_entries(pid) == []
        assert f"{PREFIX}-{os.getpid()}-a11ce" in owned_entries(os.getpid())
    finally:
        mine.unlink()
