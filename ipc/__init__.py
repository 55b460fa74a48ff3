"""Shared-memory transport between processes: segments, SPSC rings, doorbells, frames."""

from ipc.channel import Channel, Receiver, Sender
from ipc.errors import (FrameError, IpcError, LayoutError, MessageTooLarge, RingFull,
                        SegmentError, ShmFull)
from ipc.frames import Message
from ipc.segment import Segment, owned_entries, pid_alive, reap_orphans

__all__ = [
    "Channel", "Sender", "Receiver", "Segment", "Message", "owned_entries", "pid_alive",
    "reap_orphans", "IpcError", "SegmentError", "ShmFull", "RingFull", "FrameError",
    "MessageTooLarge", "LayoutError",
]
