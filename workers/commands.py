"""What the supervisor's two threads say to each other: typed messages on queues, never closures.

The main thread (lifecycle, admin desk) sends commands to the dispatcher thread, which alone writes
the rings; the dispatcher answers the two commands whose outcome the main thread needs.
"""

from dataclasses import dataclass


# ---- main thread -> dispatcher


@dataclass(frozen=True)
class FailDie:
    """Die `die`'s worker exited: end its requests. `final`: the die is FAILED, report its last notes."""

    die: int
    detail: str
    final: bool = False


@dataclass(frozen=True)
class FailFront:
    """Front `front` exited: stop the generations nobody reads any more."""

    front: int


@dataclass(frozen=True)
class AdminReply:
    """The admin desk's answer to request `rid` of front `front`: an HTTP status and a JSON body."""

    front: int
    rid: int
    status: int
    body: dict


@dataclass(frozen=True)
class ToDie:
    """A control message for die `die` (LOAD_SLOT, FREE_CACHES)."""

    die: int
    kind: int
    payload: bytes = b""


@dataclass(frozen=True)
class EmptySlot:
    """Refuse what still waits for `slot`, tell its `dies` to drop it; answered by SlotEmptied."""

    slot: int
    dies: tuple


# ---- dispatcher -> main thread


@dataclass(frozen=True)
class SlotEmptied:
    slot: int
    aborted: int  # requests that were running or queued on the slot


@dataclass(frozen=True)
class DieFailed:
    """After FailDie(final=True): the die's last SLOT_FAILED notes, so its slots fail with the cause."""

    die: int
    detail: str
    notes: tuple
