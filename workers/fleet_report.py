"""What front 0 tells a `pantheon router` about this instance: served models and load, from the shared tables."""

from pantheon.serve.registration import Registrar
from workers.tables import PRESSURE_LEVELS


def snapshot(backend):
    """{"models": names that can serve now, "load": in_flight, queued, kv_pressure, pressure}."""
    models = sorted(m.name for m in backend.models() if m.state == "loaded" and m.replicas > 0)
    tables = backend.tables
    running = int(tables.dies["in_flight"].sum())
    admitted = int(tables.slot_in_flight.sum())  # running or queued, per the dispatcher
    inst = tables.instance[0]
    total = int(inst["ram_total"])
    # KV caches live in RAM on CPU dies: the share of RAM in use is the instance's KV pressure
    kv = min(1.0, max(0.0, 1.0 - int(inst["ram_available"]) / total)) if total else 0.0
    return {"models": models, "load": {"in_flight": admitted, "queued": max(0, admitted - running),
                                       "kv_pressure": round(kv, 4), "pressure": PRESSURE_LEVELS[int(inst["pressure"])]}}


def start_registrar(config, sock, backend, log):
    """A started Registrar when this instance was given --registry, else None."""
    if config.registry is None:
        return None
    return Registrar(config.registry, sock.getsockname(), lambda: snapshot(backend), log).start()
