"""Single-producer single-consumer ring of fixed slots in shared memory; commit last, no locks.

Layout (little-endian, offsets in bytes; see docs/ipc.md):
    0    line 0, written once by the owner: magic, layout version, nslots, slot_size,
         start_seq, generation (the owner bumps it when the producer is replaced)
    64   line 1, producer's: producer pid
    128  line 2, consumer's: read_seq (next sequence it will read), sleeping flag, consumer pid
    256  nslots slots of slot_size bytes: [commit seq u64][frame bytes ...]

A slot is valid for sequence s only when its first 8 bytes equal s; the producer writes the
frame first and s last, and marks the slot `s | WRITING` before touching the frame, so a
producer killed in between leaves a slot that no consumer accepts and that the owner can see.
Correct store order relies on x86-64 total store order (each field is one aligned store).
"""

import os
import struct

from ipc.errors import LayoutError

RING_MAGIC = 0x474E5250  # "PRNG"
RING_VERSION = 1
HEADER_SIZE = 256
SLOT_HEADER = 8
WRITING = 1 << 63
INVALID = (1 << 64) - 1
MAX_START_SEQ = 1 << 62

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
_LINE0 = struct.Struct("<IHHIIQI")
OFF_GEN = 24
OFF_PRODUCER_PID = 64
OFF_READ_SEQ = 128
OFF_SLEEPING = 136
OFF_CONSUMER_PID = 140


def ring_bytes(nslots, slot_size):
    """Bytes a ring of this geometry occupies in a segment."""
    return HEADER_SIZE + nslots * slot_size


class Ring:
    """One direction of one channel. A process uses it either as producer or as consumer."""

    def __init__(self, buf, nslots, slot_size, start_seq=0, generation=0, format=True):
        _check_geometry(nslots, slot_size, start_seq)
        if len(buf) < ring_bytes(nslots, slot_size):
            need = ring_bytes(nslots, slot_size)
            raise LayoutError(f"buffer of {len(buf)} bytes < ring of {need}")
        self.buf = buf
        self.nslots = nslots
        self.slot_size = slot_size
        self.mask = nslots - 1
        self.start_seq = start_seq
        if format:
            self._format(generation)
        else:
            self._verify()
        self.wseq = start_seq
        self.rseq = start_seq
        self.rcache = start_seq

    def _format(self, generation):
        _LINE0.pack_into(self.buf, 0, RING_MAGIC, RING_VERSION, 0, self.nslots, self.slot_size,
                         self.start_seq, generation)
        U64.pack_into(self.buf, OFF_READ_SEQ, self.start_seq)
        for i in range(self.nslots):
            U64.pack_into(self.buf, HEADER_SIZE + i * self.slot_size, INVALID)

    def _verify(self):
        magic, version, _, nslots, slot_size, start, _ = _LINE0.unpack_from(self.buf, 0)
        if (magic, version, nslots, slot_size, start) != (
                RING_MAGIC, RING_VERSION, self.nslots, self.slot_size, self.start_seq):
            raise LayoutError(f"ring header {magic:#x} v{version} {nslots}x{slot_size}@{start} "
                              "does not match the expected geometry")

    def slot_offset(self, seq):
        return HEADER_SIZE + (seq & self.mask) * self.slot_size

    # -- owner --------------------------------------------------------------------------

    @property
    def generation(self):
        return U32.unpack_from(self.buf, OFF_GEN)[0]

    def bump_generation(self):
        """Owner only: frames stamped with an older generation will be dropped from now on."""
        gen = (self.generation + 1) & 0xFFFFFFFF
        U32.pack_into(self.buf, OFF_GEN, gen)
        return gen

    def inspect(self):
        """The ring as shared memory says it is: positions, pids, and a slot torn mid-write."""
        committed, torn = self._scan()
        return {
            "next_write_seq": committed,
            "read_seq": self.published_read_seq(),
            "torn_seq": torn,
            "producer_pid": U32.unpack_from(self.buf, OFF_PRODUCER_PID)[0],
            "consumer_pid": U32.unpack_from(self.buf, OFF_CONSUMER_PID)[0],
            "sleeping": self.sleeping,
            "generation": self.generation,
        }

    def _scan(self):
        """(next sequence to write, sequence left marked WRITING or None), from the slots alone."""
        top, torn = None, None
        for i in range(self.nslots):
            s = U64.unpack_from(self.buf, HEADER_SIZE + i * self.slot_size)[0]
            if s == INVALID:
                continue
            if s & WRITING:
                torn = s & ~WRITING
            elif top is None or s > top:
                top = s
        nxt = self.start_seq if top is None else top + 1
        return nxt, torn

    # -- producer -----------------------------------------------------------------------

    def adopt_producer(self):
        """Become the producer (first or replacing a dead one): resume after the last commit."""
        self.wseq = self._scan()[0]
        self.rcache = self.published_read_seq()
        U32.pack_into(self.buf, OFF_PRODUCER_PID, os.getpid())

    def has_space(self):
        """True when the slot for `wseq` has been released by the consumer."""
        if self.wseq - self.rcache < self.nslots:
            return True
        self.rcache = U64.unpack_from(self.buf, OFF_READ_SEQ)[0]
        return self.wseq - self.rcache < self.nslots

    def begin(self):
        """Offset of the slot for `wseq`, marked WRITING; the caller must have checked has_space."""
        off = HEADER_SIZE + (self.wseq & self.mask) * self.slot_size
        U64.pack_into(self.buf, off, self.wseq | WRITING)
        return off

    def commit(self, off):
        """Publish the slot: the sequence is the last thing written."""
        U64.pack_into(self.buf, off, self.wseq)
        self.wseq += 1

    # -- consumer -----------------------------------------------------------------------

    def adopt_consumer(self):
        """Become the consumer: resume at the sequence the previous one published."""
        self.rseq = self.published_read_seq()
        U32.pack_into(self.buf, OFF_CONSUMER_PID, os.getpid())

    def peek(self):
        """Offset of the slot holding sequence `rseq` if committed, else -1."""
        off = HEADER_SIZE + (self.rseq & self.mask) * self.slot_size
        if U64.unpack_from(self.buf, off)[0] == self.rseq:
            return off
        return -1

    def release(self):
        """Hand the slot back to the producer (after its bytes were copied out)."""
        self.rseq += 1
        U64.pack_into(self.buf, OFF_READ_SEQ, self.rseq)

    def published_read_seq(self):
        return U64.unpack_from(self.buf, OFF_READ_SEQ)[0]

    @property
    def sleeping(self):
        return U32.unpack_from(self.buf, OFF_SLEEPING)[0]

    @sleeping.setter
    def sleeping(self, value):
        U32.pack_into(self.buf, OFF_SLEEPING, value)


def _check_geometry(nslots, slot_size, start_seq):
    if nslots < 2 or nslots & (nslots - 1):
        raise LayoutError(f"nslots must be a power of two >= 2, got {nslots}")
    if slot_size < 128 or slot_size % 64:
        raise LayoutError(f"slot_size must be a multiple of 64 and >= 128, got {slot_size}")
    if not 0 <= start_seq < MAX_START_SEQ:
        raise LayoutError(f"start_seq must be in [0, 2**62), got {start_seq}")
