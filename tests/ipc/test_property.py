"""Random-size messages between two forked processes: in order, byte-exact, no dups (a million with --run-slow)."""

import os
import struct
import time
import zlib

import numpy as np
import pytest

from ipc import Channel
from tests.ipc.kinds import Kind
from tests.ipc.forking import fork, wait

COUNT = int(os.environ.get("PANTHEON_IPC_MESSAGES", "1000000"))
QUICK_COUNT = 50_000  # still crosses 2^32 and wraps the ring hundreds of times
SLOT = 256
NSLOTS = 64
POOL = 1 << 20
CRC = struct.Struct("<I")


def plan(seed, count, frag_cap):
    """Sizes (mostly one slot, a quarter up to four slots) and offsets into a random pool."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, frag_cap + 1, count)  # [count]
    large = rng.integers(0, 4 * SLOT + 1, count)  # [count]
    sizes = np.where(rng.random(count) < 0.75, small, large)  # [count]
    offs = rng.integers(0, POOL - 4 * SLOT, count)  # [count]
    return rng.bytes(POOL), sizes.tolist(), offs.tolist()


def produce(ch, seed, count, seq0):
    pool, sizes, offs = plan(seed, count, ch.frag_cap)
    send = ch.sender().send
    for i in range(count):
        body = pool[offs[i]:offs[i] + sizes[i]]
        send(Kind.TOKENS, i, (seq0 + i) & 0xFFFFFFFF, body + CRC.pack(zlib.crc32(body)), 30.0)


@pytest.mark.slow
def test_million_random_messages_in_order_byte_exact():
    check_random_messages(COUNT)


def test_random_messages_in_order_byte_exact():
    check_random_messages(QUICK_COUNT)


def check_random_messages(count):
    start = 2**32 - count // 2  # ring sequences cross 2^32 half-way
    ch = Channel(nslots=NSLOTS, slot_size=SLOT, start_seq=start)
    seed = int.from_bytes(os.urandom(4), "little")
    rx = ch.receiver()
    t0 = time.monotonic()
    pid = fork(produce, ch, seed, count, start)
    pool, sizes, offs = plan(seed, count, ch.frag_cap)
    recv = rx.receive
    for i in range(count):
        m = recv(30.0)
        assert m is not None, f"message {i} never arrived (seed {seed})"
        p = m.payload
        assert m.request_id == i and m.seq == (start + i) & 0xFFFFFFFF, (i, m.request_id, seed)
        body = p[:-4]
        assert CRC.unpack(p[-4:])[0] == zlib.crc32(body), (i, seed)
        assert body == pool[offs[i]:offs[i] + sizes[i]], (i, seed)
    assert rx.receive(timeout=0.01) is None  # nothing duplicated after the last
    assert wait(pid) == 0
    frames_sent = ch.inspect()["next_write_seq"] - start
    assert frames_sent >= count and frames_sent // NSLOTS > count // 100  # many wrap-arounds
    assert start < 2**32 < start + frames_sent
    print(f"{count} messages, {frames_sent} frames in {time.monotonic() - t0:.1f} s")
