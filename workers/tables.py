"""Shared-memory tables every process can read: model slots (supervisor writes), dies (split writers).

Both are numpy structured arrays over a segment created before fork. Each field has exactly one
writing process; a model slot's record changes under a sequence lock (odd while being written), so
readers in the fronts retry instead of seeing a torn name or path. No lock is held across processes.
"""

import time

import numpy as np

from pantheon.serve.limits import MAX_NAME_BYTES, MAX_PATH_BYTES

MAX_SLOTS = 16
REASON_BYTES = 256  # a slot's failure reason is a message: cut to this many bytes, on a character boundary

SLOT_EMPTY, SLOT_LOADING, SLOT_LOADED, SLOT_FAILED, SLOT_UNLOADING = range(5)
SLOT_STATES = ("empty", "loading", "loaded", "failed", "unloading")

DIE_DOWN, DIE_STARTING, DIE_UP, DIE_FAILED, DIE_DEGRADED, DIE_STALLED = range(6)
DIE_STATES = ("down", "starting", "up", "failed", "degraded", "stalled")

SLOT_DTYPE = np.dtype([
    ("version", "<u8"), ("state", "u1"), ("name", f"S{MAX_NAME_BYTES}"), ("path", f"S{MAX_PATH_BYTES}"),
    ("config", f"S{MAX_PATH_BYTES}"), ("reason", f"S{REASON_BYTES}"),
    ("dies", "<u8"), ("ctx_cap", "<u4"), ("batch_slots", "<u4"), ("max_sessions", "<u4"),
    ("max_concurrent", "<u4"), ("reasoning_budget", "<u4"), ("quantize", "u1"), ("created", "<u8"),
    ("split", "S128"),  # CUDA layer-split groups: 'cuda0+cuda1[,cuda2+cuda3]'; the first die of a group runs it
    ("serial", "<u8"),  # which placement of a model this is: a new one each time a model enters the slot
    ("pooling", "u1"),  # --pooling: 0 the GGUF's, else 1 + its index in POOLING_TYPES
])

# worker-written: heartbeat .. rss; supervisor-written: pid .. restarts.
DIE_DTYPE = np.dtype([
    ("heartbeat", "<f8"), ("in_flight", "<u4"), ("completed", "<u8"), ("loaded", "<u8"),
    ("failed", "<u8"), ("rss", "<u8"),
    ("pid", "<i4"), ("generation", "<u4"), ("state", "u1"), ("restarts", "<u4"),
])


# dispatcher-written: requests running or queued per slot; supervisor-written: memory pressure.
COUNTS_DTYPE = np.dtype("<u4")
INSTANCE_DTYPE = np.dtype([("pressure", "u1"), ("ram_available", "<u8"), ("ram_total", "<u8")])
PRESSURE_LEVELS = ("OK", "WATCH", "TIGHT", "CRITICAL")


def table_bytes(n_dies):
    return (SLOT_DTYPE.itemsize * MAX_SLOTS + DIE_DTYPE.itemsize * n_dies + COUNTS_DTYPE.itemsize * MAX_SLOTS
            + INSTANCE_DTYPE.itemsize)


class Tables:
    """Views of the slot and die tables inside `buf` (a memoryview of a shared segment)."""

    def __init__(self, buf, n_dies):
        n_slot_bytes = SLOT_DTYPE.itemsize * MAX_SLOTS
        self.slots = np.frombuffer(buf, dtype=SLOT_DTYPE, count=MAX_SLOTS)  # [16] records
        self.dies = np.frombuffer(buf, dtype=DIE_DTYPE, count=n_dies, offset=n_slot_bytes)  # [D] records
        at = n_slot_bytes + DIE_DTYPE.itemsize * n_dies
        self.slot_in_flight = np.frombuffer(buf, dtype=COUNTS_DTYPE, count=MAX_SLOTS, offset=at)  # [16]
        at += COUNTS_DTYPE.itemsize * MAX_SLOTS
        self.instance = np.frombuffer(buf, dtype=INSTANCE_DTYPE, count=1, offset=at)  # [1] record

    def write_slot(self, i, **fields):
        """Supervisor only: update slot `i` under its sequence lock."""
        rec = self.slots[i]
        encoded = {k: _encoded(k, v) for k, v in fields.items()}
        rec["version"] += 1
        for k, v in encoded.items():
            rec[k] = v
        rec["version"] += 1

    def read_slot(self, i, attempts=1000):
        """A consistent copy of slot `i` (retrying while the supervisor writes it)."""
        for _ in range(attempts):
            v0 = int(self.slots[i]["version"])
            copy = self.slots[i].copy()
            if v0 % 2 == 0 and int(self.slots[i]["version"]) == v0:
                return copy
            time.sleep(0)
        raise RuntimeError(f"model slot {i} stayed mid-write")

    def live_slots(self):
        """(index, record) of every non-empty slot."""
        out = []
        for i in range(MAX_SLOTS):
            rec = self.read_slot(i)
            if rec["state"] != SLOT_EMPTY:
                out.append((i, rec))
        return out


def _encoded(key, value):
    """A str field as bytes: the reason is cut to fit, a name or path that does not fit is a bug
    (settings.parse_id / parse_model_path refuse them before they get here)."""
    if not isinstance(value, str):
        return value
    raw = value.encode("utf-8", "surrogateescape")
    if key == "reason":
        return raw[:REASON_BYTES].decode("utf-8", "ignore").encode()
    if len(raw) > SLOT_DTYPE[key].itemsize:
        raise ValueError(f"slot field {key} of {len(raw)} bytes exceeds {SLOT_DTYPE[key].itemsize}")
    return raw


def text(field):
    """A fixed-width bytes field as str."""
    return bytes(field).rstrip(b"\0").decode("utf-8", "surrogateescape")
