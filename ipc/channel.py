"""Channels: one SPSC ring plus its doorbell; Sender and Receiver are the two ends after fork."""

import struct
import time

from ipc import frames
from ipc.doorbell import make_doorbell
from ipc.errors import FrameError, MessageTooLarge, RingFull
from ipc.frames import FIRST, HEADER, HEADER_SIZE, KINDS, LAST, MAGIC, VERSION, Message
from ipc.recheck import DEFAULT_IDLE_RECHECK_S, DEFAULT_RECHECK_S, Recheck
from ipc.ring import HEADER_SIZE as HEADER_SIZE_RING
from ipc.ring import (OFF_GEN, OFF_READ_SEQ, OFF_SLEEPING, SLOT_HEADER, U32, U64, WRITING, Ring,
                      ring_bytes)
from ipc.segment import Segment

DEFAULT_MAX_MESSAGE = 4 << 20
DEFAULT_SPIN_S = 20e-6
_DATA = SLOT_HEADER + HEADER_SIZE
_U64_MAX = (1 << 64) - 1
_U32_MAX = 0xFFFFFFFF
_FLAGS = FIRST | LAST
_SLOT = struct.Struct("<Q" + HEADER.format.lstrip("<"))
_new = tuple.__new__
# the header's first 8 bytes read as one word: magic, version, (kind), flags, reserved
_FAST = struct.Struct("<QQIIII")
_FAST_MASK = ~(0xFF << 24) & ((1 << 64) - 1)
_FAST_ONE = MAGIC | VERSION << 16 | _FLAGS << 32


class Channel:
    """Shared state of one direction, created by the owner before fork.

    Pass `segment` and `offset` to carve the ring out of a larger segment (use
    `Channel.nbytes` to size it); otherwise the channel creates a segment of its own.
    """

    def __init__(self, nslots=256, slot_size=1024, start_seq=0, doorbell="eventfd",
                 segment=None, offset=0, max_message=DEFAULT_MAX_MESSAGE, generation=0):
        size = ring_bytes(nslots, slot_size)
        self.segment = Segment(size) if segment is None else segment
        self.buf = self.segment.view(offset, size)
        self.ring = Ring(self.buf, nslots, slot_size, start_seq, generation)
        self.doorbell = make_doorbell(doorbell)
        self.max_message = max_message
        self.geometry = (nslots, slot_size, start_seq)
        self.base = offset

    @staticmethod
    def nbytes(nslots, slot_size):
        return ring_bytes(nslots, slot_size)

    @property
    def frag_cap(self):
        return self.geometry[1] - _DATA

    def bump_generation(self):
        """Owner only: after replacing the producer, drop every frame the old one stamped."""
        return self.ring.bump_generation()

    def inspect(self):
        return self.ring.inspect()

    def sender(self, generation=None):
        return Sender(self, generation)

    def receiver(self, spin_s=DEFAULT_SPIN_S, recheck_s=DEFAULT_RECHECK_S, idle_recheck_s=DEFAULT_IDLE_RECHECK_S):
        return Receiver(self, spin_s, recheck_s, idle_recheck_s)


class Sender:
    """The producing end. Adopts the ring on creation, so a replacement resumes cleanly."""

    def __init__(self, channel, generation=None):
        self._ring = Ring(channel.buf, *channel.geometry, format=False)
        self._ring.adopt_producer()
        self._buf = channel.buf
        self._bell = channel.doorbell
        self.max_message = channel.max_message
        self.frag_cap = channel.frag_cap
        self.generation = self._ring.generation if generation is None else generation
        self.fault_before_commit = None

    def send(self, kind, request_id, seq, payload=b"", timeout=None):
        """Write one message (fragmented if needed); wait `timeout` s for space, then RingFull."""
        n = len(payload)
        if n > self.max_message:
            raise MessageTooLarge(f"message of {n} bytes exceeds limit {self.max_message}")
        if kind not in KINDS or not (0 <= request_id <= _U64_MAX and 0 <= seq <= _U32_MAX):
            frames.check_ids(kind, request_id, self.generation, seq)
        if n <= self.frag_cap:
            self._frame(kind, request_id, seq, _FLAGS, n, payload, timeout)
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        view = memoryview(payload).cast("B")
        cap = self.frag_cap
        for start in range(0, n, cap):
            flags = (FIRST if start == 0 else 0) | (LAST if start + cap >= n else 0)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._frame(kind, request_id, seq, flags, n, view[start:start + cap], left)

    def _frame(self, kind, request_id, seq, flags, total, chunk, timeout):
        ring = self._ring
        wseq = ring.wseq
        if wseq - ring.rcache >= ring.nslots and not ring.has_space():
            self._wait_space(timeout)
        off = HEADER_SIZE_RING + (wseq & ring.mask) * ring.slot_size
        k = len(chunk)
        buf = self._buf
        # one store for the WRITING mark and the header: the consumer ignores both until commit
        _SLOT.pack_into(buf, off, wseq | WRITING, MAGIC, VERSION, kind, flags, 0, 0,
                        request_id, self.generation, seq, total, k)
        buf[off + _DATA:off + _DATA + k] = chunk
        if self.fault_before_commit is not None:
            self.fault_before_commit()
        U64.pack_into(buf, off, wseq)
        ring.wseq = wseq + 1
        if U32.unpack_from(buf, OFF_SLEEPING)[0]:
            # clear before ringing so a burst rings once; a consumer that re-set the flag in
            # between still finds the doorbell rung
            U32.pack_into(buf, OFF_SLEEPING, 0)
            self._bell.ring()

    def flush(self, timeout):
        """Wait up to `timeout` s until the consumer has read every message sent; True if it has.
        A producer about to exit calls it so that its last words are read before its exit is seen."""
        ring = self._ring
        deadline = time.monotonic() + timeout
        while ring.published_read_seq() < ring.wseq:
            if ring.sleeping:
                ring.sleeping = 0
                self._bell.ring()
            if time.monotonic() >= deadline:
                return False
            time.sleep(1e-3)
        return True

    def _wait_space(self, timeout):
        """Backpressure: poll with a growing sleep; never overwrite an unread slot."""
        ring = self._ring
        deadline = None if timeout is None else time.monotonic() + timeout
        nap = 20e-6
        while not ring.has_space():
            if ring.sleeping:
                ring.sleeping = 0
                self._bell.ring()
            if deadline is not None and time.monotonic() >= deadline:
                raise RingFull(f"ring full ({ring.nslots} slots unread) for {timeout:.3f} s; "
                               f"consumer at seq {ring.rcache}, producer at {ring.wseq}")
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)


class Receiver:
    """The consuming end: spin briefly, then sleep on the doorbell with a bounded wait (ipc.recheck)."""

    def __init__(self, channel, spin_s=DEFAULT_SPIN_S, recheck_s=DEFAULT_RECHECK_S,
                 idle_recheck_s=DEFAULT_IDLE_RECHECK_S):
        self._ring = Ring(channel.buf, *channel.geometry, format=False)
        self._ring.adopt_consumer()
        self._buf = channel.buf
        self._mm = channel.segment.mmap
        self._base = channel.base + _DATA
        self._bell = channel.doorbell
        self.max_message = channel.max_message
        self.frag_cap = channel.frag_cap
        self.spin_s = spin_s
        self.recheck = Recheck(recheck_s, idle_recheck_s)
        self.dropped_stale = 0
        self.dropped_partial = 0
        self._asm = None

    def receive(self, timeout=None):
        """Next message, or None when `timeout` seconds pass (None: wait forever)."""
        msg = self.poll()
        if msg is not None or timeout == 0:
            return self._seen(msg)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            woke = self._await(deadline)
            msg = self.poll()
            if msg is not None or not woke:
                return self._seen(msg)

    def _seen(self, msg):
        if msg is not None:
            self.recheck.traffic()
        return msg

    def _await(self, deadline):
        """Return True when a slot may be ready, False once the deadline passed."""
        ring = self._ring
        spin_end = time.monotonic() + self.spin_s
        while time.monotonic() < spin_end:
            if ring.peek() >= 0:
                return True
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            wait = self.recheck.wait(now, deadline)
            ring.sleeping = 1
            if ring.peek() >= 0:
                ring.sleeping = 0
                return True
            self._bell.wait(wait)
            ring.sleeping = 0
            if ring.peek() >= 0:
                return True
            self.recheck.empty()

    def poll(self):
        """Next complete message if one is committed now; never blocks."""
        ring, buf = self._ring, self._buf
        min_gen = U32.unpack_from(buf, OFF_GEN)[0]
        while True:
            rseq = ring.rseq
            off = HEADER_SIZE_RING + (rseq & ring.mask) * ring.slot_size
            if U64.unpack_from(buf, off)[0] != rseq:
                return None
            word, rid, gen, seq, total, k = _FAST.unpack_from(buf, off + SLOT_HEADER)
            kind = (word >> 24) & 0xFF
            if ((word & _FAST_MASK) == _FAST_ONE and kind in KINDS and gen >= min_gen
                    and k == total <= self.frag_cap and self._asm is None):
                # the common case inlined: one whole, current, well-formed frame
                start = self._base + off
                msg = _new(Message, (kind, rid, gen, seq, self._mm[start:start + k]))
                ring.rseq = rseq + 1
                U64.pack_into(buf, OFF_READ_SEQ, rseq + 1)
                return msg
            try:
                msg = self._accept(HEADER.unpack_from(buf, off + SLOT_HEADER), off, min_gen)
            finally:
                ring.rseq = rseq + 1
                U64.pack_into(buf, OFF_READ_SEQ, rseq + 1)
            if msg is not None:
                return msg

    def _accept(self, hdr, off, min_gen):
        magic, version, kind, flags, _, _, rid, gen, seq, total, k = hdr
        if (magic != MAGIC or version != VERSION or kind not in KINDS or flags & ~_FLAGS
                or k > self.frag_cap or total > self.max_message):
            frames.check_header(magic, version, kind, flags, k, total, self.frag_cap,
                                self.max_message)
        if gen < min_gen:
            self.dropped_stale += 1
            if self._asm is not None:
                self._drop_partial()
            return None
        if flags == _FLAGS:
            if self._asm is not None:
                self._drop_partial()
            if k != total:
                raise FrameError(f"single-fragment message has {k} bytes, header says {total}")
            start = self._base + off
            return _new(Message, (kind, rid, gen, seq, self._mm[start:start + k]))
        data = self._buf[off + _DATA:off + _DATA + k]
        return self._assemble(kind, flags, rid, gen, seq, total, data)

    def _assemble(self, kind, flags, rid, gen, seq, total, data):
        if flags & FIRST:
            if self._asm is not None:
                self._drop_partial()
            self._asm = ((kind, rid, gen, seq, total), bytearray(total), 0)
        elif self._asm is None:
            self.dropped_partial += 1
            return None
        key, body, filled = self._asm
        if key != (kind, rid, gen, seq, total) or filled + len(data) > total:
            self._asm = None
            raise FrameError(f"continuation {(kind, rid, gen, seq, total)} does not extend {key}")
        body[filled:filled + len(data)] = data
        filled += len(data)
        if not flags & LAST:
            self._asm = (key, body, filled)
            return None
        self._asm = None
        if filled != total:
            raise FrameError(f"message ended at {filled} of {total} bytes")
        return _new(Message, (kind, rid, gen, seq, bytes(body)))

    def _drop_partial(self):
        """A new message began while one was half-assembled: its producer was replaced."""
        self.dropped_partial += 1
        self._asm = None
