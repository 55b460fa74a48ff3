"""The supervisor's view of memory pressure: a PressureMonitor fed by RAM (or a test file) and NVML."""

import time

from pantheon.serve.dies import die_memory
from pantheon.serve.memory import PressureLevel, PressureMonitor, ram_source

POLL_S = 0.5


def file_source(path):
    """A RAM source read from a file holding "available total" in bytes: tests drive pressure with it."""
    def read():
        with open(path) as f:
            available, total = (int(x) for x in f.read().split()[:2])
        return available, total
    return read


class PressureWatch:
    """Polled from the supervisor's main loop; publishes the level in the shared instance record."""

    def __init__(self, ops, die_list, nvml=None):
        cuda = {d.name: d for d in die_list if d.kind == "cuda"}
        vram = (lambda: die_memory(cuda, nvml)) if cuda else None
        self.source = file_source(ops.pressure_file) if ops.pressure_file else ram_source()
        self.monitor = PressureMonitor(self.source, vram_source=vram)
        self.next_at = 0.0

    def poll(self, instance):
        """Update at most every POLL_S; returns (old, new) level when it changed, else None."""
        now = time.monotonic()
        if now < self.next_at:
            return None
        self.next_at = now + POLL_S
        old = self.monitor.level
        new = self.monitor.update()
        available, total = self.monitor.ram.reading
        instance["pressure"], instance["ram_available"], instance["ram_total"] = int(new), available, total
        return (old, new) if new != old else None

    def available(self):
        return self.source()

    @staticmethod
    def frees_caches(level):
        """From TIGHT on, workers drop the prefix caches of idle sessions."""
        return level >= PressureLevel.TIGHT
