"""Typed errors of the shared-memory transport: each names the value that was refused."""


class IpcError(Exception):
    """Base of every error the transport raises on purpose."""


class SegmentError(IpcError, OSError):
    """A shared-memory segment could not be created or reserved."""


class ShmFull(SegmentError):
    """/dev/shm has no room for the segment; raised at start-up instead of a SIGBUS later."""


class RingFull(IpcError, TimeoutError):
    """The consumer did not free a slot within the send timeout; nothing was overwritten."""


class FrameError(IpcError, ValueError):
    """A frame is malformed: bad magic, version, kind, flags or a length over a limit."""


class MessageTooLarge(FrameError):
    """A message exceeds the channel's configured maximum size."""


class LayoutError(IpcError, ValueError):
    """A ring's geometry is invalid, or an attached header does not match what is expected."""
