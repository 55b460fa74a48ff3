"""Frame format: a fixed 32-byte header on every slot, an opaque kind byte, checked limits.

Header (little-endian), at slot offset 8 right after the ring's commit sequence:
    u16 magic  u8 version  u8 kind  u8 flags  u8 reserved  u16 reserved
    u64 request_id  u32 generation  u32 seq  u32 total_len  u32 frag_len
A message whose payload does not fit one slot travels as consecutive fragments that repeat
the header; the first carries FIRST, the last LAST (a one-slot message carries both). What a kind
means is the business of the processes that speak over the rings (workers/protocol.py); the
transport only refuses kind 0, which marks a slot never written.
"""

import struct
from typing import NamedTuple

from ipc.errors import FrameError

MAGIC = 0x5046  # "PF"
VERSION = 1
HEADER = struct.Struct("<HBBBBHQIIII")
HEADER_SIZE = HEADER.size
FIRST = 1
LAST = 2
FLAGS_MASK = FIRST | LAST
U32_MAX = 0xFFFFFFFF
U64_MAX = (1 << 64) - 1


KINDS = frozenset(range(1, 256))


class Message(NamedTuple):
    """One reassembled message as the consumer sees it."""

    kind: int  # 1..255; workers.protocol.Kind names them
    request_id: int
    generation: int
    seq: int
    payload: bytes


def check_ids(kind, request_id, generation, seq):
    """Refuse a header field out of range before anything is written to shared memory."""
    if kind not in KINDS:
        raise FrameError(f"unknown message kind {kind!r}")
    if not 0 <= request_id <= U64_MAX:
        raise FrameError(f"request id {request_id} outside u64")
    if not 0 <= generation <= U32_MAX:
        raise FrameError(f"generation {generation} outside u32")
    if not 0 <= seq <= U32_MAX:
        raise FrameError(f"per-request seq {seq} outside u32")


def check_header(magic, version, kind, flags, frag_len, total_len, frag_cap, max_message):
    """Validate a decoded header against the protocol and this channel's limits."""
    if magic != MAGIC:
        raise FrameError(f"bad frame magic {magic:#06x}, expected {MAGIC:#06x}")
    if version != VERSION:
        raise FrameError(f"frame version {version} unsupported (this side speaks {VERSION})")
    if kind not in KINDS:
        raise FrameError(f"unknown message kind {kind}")
    if flags & ~FLAGS_MASK:
        raise FrameError(f"unknown frame flags {flags:#x}")
    if frag_len > frag_cap:
        raise FrameError(f"fragment of {frag_len} bytes exceeds slot capacity {frag_cap}")
    if total_len > max_message:
        raise FrameError(f"message of {total_len} bytes exceeds limit {max_message}")


def fragments(total_len, frag_cap):
    """Number of slots a payload of total_len bytes needs (an empty payload still takes one)."""
    return max(1, -(-total_len // frag_cap))
