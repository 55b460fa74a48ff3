"""The fit check of every load on this instance: start-up models and admin loads alike."""

from pantheon.errors import UsageError
from pantheon.serve import fit
from pantheon.serve.memory import MemInfo
from workers.slots import spec_of
from workers.tables import text

REFUSING = (fit.DOES_NOT_FIT, fit.REFUSED)


class Admission:
    """pantheon.serve.fit.admission against the RAM available now (the pressure source) and free VRAM."""

    def __init__(self, pressure, die_list, quantize, tables, nvml=None):
        self.pressure, self.quantize, self.tables, self.nvml = pressure, quantize, tables, nvml
        self.dies = {d.name: d for d in die_list}

    def verdict(self, spec, batch_slots, shared=None):
        """`shared`: paths already mapped (default: every live slot's), whose weights add nothing."""
        if shared is None:
            shared = [text(rec["path"]) for _, rec in self.tables.live_slots()]
        available, total = self.pressure.available()
        free = fit.free_vram(spec.dies, self.dies, self.nvml)
        return fit.admission(spec, batch_slots, self.quantize, MemInfo(total, available, "pressure"), free, shared)

    def check_startup(self, n_slots):
        """Every --model passes the same check as a run-time load, or the instance does not start."""
        seen = []
        for i in range(n_slots):
            spec, batch_slots, _ = spec_of(self.tables.read_slot(i), list(self.dies))
            v = self.verdict(spec, batch_slots, shared=seen)
            if v.kind in REFUSING:
                raise UsageError(f"model {spec.name!r} cannot be admitted:\n{v.table()}")
            seen.append(spec.path)
