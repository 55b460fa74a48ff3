"""Memory pressure: effective available RAM (host and cgroups), per-die VRAM, levels with hysteresis."""

import enum
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

MiB = 1 << 20
# cgroup v1 writes "no limit" as LONG_MAX rounded down to a page (9223372036854771712); anything
# this large is no limit on any real machine.
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class MemInfo:
    """Bytes; `source` names what decided `available`: 'host', 'cgroup2:/a/b' or 'cgroup1:/a/b'."""

    total: int
    available: int
    source: str


# ---- available RAM: host /proc/meminfo, then the tightest cgroup on the way to the root


def available_ram(proc_root="/proc", cgroup_root="/sys/fs/cgroup", self_cgroup=None) -> MemInfo:
    """min(host MemAvailable, the tightest cgroup's limit - usage over this process's cgroup ancestry).

    `self_cgroup` is the text of a /proc/<pid>/cgroup file (None: read <proc_root>/self/cgroup).
    Usage excludes the cgroup's inactive file pages, which the kernel reclaims before it OOM-kills.
    """
    total, available = _host_meminfo(os.path.join(proc_root, "meminfo"))
    best = MemInfo(total, available, "host")
    if self_cgroup is None:
        self_cgroup = _read_text(os.path.join(proc_root, "self", "cgroup")) or ""
    for limit, free, source in _cgroup_limits(self_cgroup, cgroup_root):
        if free < best.available:
            best = MemInfo(min(best.total, limit), max(free, 0), source)
        elif limit < best.total:
            best = MemInfo(limit, best.available, best.source)
    return best


def _read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _read_int(path):
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None  # "max" (v2's no limit) or unreadable


def _host_meminfo(path):
    """(MemTotal, MemAvailable) in bytes; OSError if /proc/meminfo cannot be read."""
    with open(path) as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    total = _kib(fields["MemTotal"])
    if "MemAvailable" in fields:
        return total, _kib(fields["MemAvailable"])
    # Kernels before 3.14 lack MemAvailable; free + buffers + cache is the old approximation.
    return total, sum(_kib(fields.get(k, "0 kB")) for k in ("MemFree", "Buffers", "Cached"))


def _kib(text):
    return int(text.split()[0]) * 1024


def _cgroup_paths(self_cgroup):
    """('v1' | 'v2' | None, path): the memory controller's hierarchy, v1 winning on hybrid systems."""
    v2 = None
    for line in self_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if "memory" in controllers.split(","):
            return "v1", path
        if hid == "0" and controllers == "":
            v2 = path
    return ("v2", v2) if v2 is not None else (None, None)


def _ancestry(path):
    """'/a/b' -> ['/a/b', '/a', '/']."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:n]) for n in range(len(parts), -1, -1)]


def _cgroup_limits(self_cgroup, cgroup_root):
    """(limit, limit - usage, source) for every limited cgroup from this one up to the root."""
    version, path = _cgroup_paths(self_cgroup)
    if version is None:
        return []
    base = cgroup_root if version == "v2" else os.path.join(cgroup_root, "memory")
    files = _V2_FILES if version == "v2" else _V1_FILES
    out = []
    for cg in _ancestry(path):
        found = _read_limit(os.path.join(base, cg.lstrip("/")), files)
        if found is not None:
            out.append((found[0], found[0] - found[1], f"cgroup{version[1]}:{cg}"))
    return out


_V2_FILES = ("memory.max", "memory.current", "inactive_file")
_V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def _read_limit(directory, files):
    """(limit, usage) of one cgroup directory, or None when it has no limit or no such files."""
    limit_file, usage_file, stat_key = files
    limit = _read_int(os.path.join(directory, limit_file))
    if limit is None or limit >= _V1_UNLIMITED:
        return None
    usage = _read_int(os.path.join(directory, usage_file)) or 0
    inactive = _memory_stat(os.path.join(directory, "memory.stat")).get(stat_key, 0)
    return limit, max(usage - inactive, 0)


def _memory_stat(path):
    text = _read_text(path) or ""
    pairs = (line.split() for line in text.splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def ram_source(proc_root="/proc", cgroup_root="/sys/fs/cgroup"):
    """A PressureMonitor source: () -> (available, total) bytes of effective RAM."""
    def read():
        m = available_ram(proc_root, cgroup_root)
        return m.available, m.total
    return read


# ---- pressure levels


class PressureLevel(enum.IntEnum):
    """Ordered: a larger value is worse."""

    OK = 0
    WATCH = 1
    TIGHT = 2
    CRITICAL = 3


@dataclass(frozen=True)
class Thresholds:
    """A level applies when the available fraction is below its number; CRITICAL also below `floor`."""

    watch: float = 0.25
    tight: float = 0.15
    critical: float = 0.07
    floor: int = 512 * MiB


@dataclass(frozen=True)
class Hysteresis:
    """Worse levels apply at once; a better one only after `updates` consecutive readings clear its
    threshold by `margin` (a fraction of total; the floor must be cleared by margin x total too)."""

    margin: float = 0.03
    updates: int = 3


def level_for(available, total, thresholds=Thresholds()):
    """The level of one reading, without hysteresis."""
    frac = available / total if total > 0 else 0.0
    if frac < thresholds.critical or available < thresholds.floor:
        return PressureLevel.CRITICAL
    if frac < thresholds.tight:
        return PressureLevel.TIGHT
    if frac < thresholds.watch:
        return PressureLevel.WATCH
    return PressureLevel.OK


@dataclass
class _Tracker:
    """One resource's level with hysteresis."""

    level: PressureLevel = PressureLevel.OK
    streak: int = 0
    candidate: PressureLevel = PressureLevel.OK
    reading: Optional[tuple] = None

    def update(self, available, total, th, hy):
        self.reading = (available, total)
        raw = level_for(available, total, th)
        if raw >= self.level:
            self.level, self.streak = raw, 0
            return self.level
        cleared = level_for(available - hy.margin * total, total, th)
        if cleared >= self.level:
            self.streak = 0
            return self.level
        # The worst level seen during the streak is where we land, so one good reading cannot overshoot.
        self.candidate = cleared if self.streak == 0 else max(self.candidate, cleared)
        self.streak += 1
        if self.streak >= hy.updates:
            self.level, self.streak = self.candidate, 0
        return self.level


class PressureMonitor:
    """Level of host RAM and every die's VRAM, with hysteresis; the worst resource decides.

    source() -> (available, total) bytes of RAM. vram_source() -> die name -> object with `used` and
    `total` (dies.DieMemory), or None for a die without a reading (CPU dies, NVML failures)."""

    def __init__(self, source=None, thresholds=Thresholds(), hysteresis=Hysteresis(),
                 vram_source: Optional[Callable[[], Mapping]] = None):
        self.source = source or ram_source()
        self.vram_source = vram_source
        self.thresholds, self.hysteresis = thresholds, hysteresis
        self.ram = _Tracker()
        self.dies = {}
        self.level = PressureLevel.OK

    def update(self) -> PressureLevel:
        """Take one reading of every resource; returns the level that now applies."""
        available, total = self.source()
        levels = [self.ram.update(available, total, self.thresholds, self.hysteresis)]
        for name, mem in (self.vram_source() if self.vram_source else {}).items():
            if mem is None:
                continue
            tracker = self.dies.setdefault(name, _Tracker())
            levels.append(tracker.update(mem.total - mem.used, mem.total, self.thresholds, self.hysteresis))
        self.level = max(levels)
        return self.level

    def snapshot(self) -> dict:
        """JSON-ready state for /health and /admin/dies."""
        return {"level": self.level.name, "ram": _describe(self.ram),
                "dies": {name: _describe(t) for name, t in sorted(self.dies.items())},
                "thresholds": {"watch": self.thresholds.watch, "tight": self.thresholds.tight,
                               "critical": self.thresholds.critical, "floor_bytes": self.thresholds.floor}}


def _describe(tracker):
    if tracker.reading is None:
        return {"level": tracker.level.name, "available_bytes": None, "total_bytes": None, "fraction": None}
    available, total = tracker.reading
    return {"level": tracker.level.name, "available_bytes": int(available), "total_bytes": int(total),
            "fraction": round(available / total, 4) if total > 0 else 0.0}


def watch(monitor, interval, on_change, stop):
    """Update `monitor` every `interval` seconds until `stop` (a threading.Event) is set, calling
    on_change(old, new, snapshot) whenever the level moves. Run it in a thread of your own; an
    OSError from a source propagates and ends the loop."""
    old = monitor.level
    while not stop.is_set():
        new = monitor.update()
        if new != old:
            on_change(old, new, monitor.snapshot())
            old = new
        stop.wait(interval)
