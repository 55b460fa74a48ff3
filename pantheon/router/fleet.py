"""The fleet: which instance serves which models, its last heartbeat and load; eviction when heartbeats lapse."""

import math
import re
from dataclasses import dataclass, field

from pantheon.errors import PantheonError

MAX_MODELS_PER_INSTANCE = 16
MAX_INSTANCES = 1024
_ID = re.compile(r"[\x21-\x7e]{1,255}")
_MODEL = re.compile(r"[\x21-\x7e]{1,128}")
_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):([0-9]{1,5})")
LOAD_FIELDS = ("in_flight", "queued", "kv_pressure")


class FleetError(PantheonError):
    """A registry request the router refuses (bad body, unknown instance, full fleet); `status` is its HTTP code."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


@dataclass
class Instance:
    """One pantheon-serve process as the router knows it."""

    id: str
    address: str              # host:port the proxy dials
    models: tuple             # served model names, sorted
    last_seen: float          # monotonic seconds of its last register/heartbeat
    load: dict = field(default_factory=lambda: {"in_flight": 0, "queued": 0, "kv_pressure": 0.0})
    pressure: str = "OK"
    draining: bool = False
    paused_mark: float = 0.0  # the fleet's paused_s at its last heartbeat

    def view(self, now):
        return {"instance": self.id, "address": self.address, "models": list(self.models),
                "state": "draining" if self.draining else "live", "pressure": self.pressure,
                "heartbeat_age_s": round(now - self.last_seen, 3), **self.load}


class Fleet:
    """Instances by id. Not thread-safe: the router holds one lock around every call.

    `tick_s` is how often the router calls `evict`; a longer gap between calls is a pause of the router
    itself (CPU starvation, a debugger, a VM migration), during which heartbeats wait unread in its
    socket. Silence the router did not watch is no evidence against an instance, so it is not counted
    (as a lease holder's clock is extended after its lessor was away). None counts every second."""

    def __init__(self, evict_after_s, tick_s=None):
        self.evict_after_s, self.tick_s = evict_after_s, tick_s
        self.instances = {}
        self.paused_s = 0.0      # the router's pauses, summed
        self._watched = None     # monotonic time of the last eviction check

    def register(self, body, peer, now):
        """A (re-)registration; it also ends a drain: the instance is serving again."""
        inst = self._upsert(body, peer, now)
        inst.draining = False
        return inst

    def heartbeat(self, body, peer, now):
        """Refresh liveness and load. A heartbeat carries the registration, so an instance the router
        does not know (the router restarted) is registered by it: the fleet rebuilds from heartbeats."""
        return self._upsert(body, peer, now)

    def deregister(self, body):
        inst = self.instances.get(_instance_id(body))
        if inst is None:
            raise FleetError(f"unknown instance {_instance_id(body)!r}", 404)
        inst.draining = True
        return inst

    def evict(self, now):
        """Remove and return every instance silent for longer than the window."""
        self._watch(now)
        gone = [i for i in self.instances.values() if self.silence(i, now) > self.evict_after_s]
        for inst in gone:
            del self.instances[inst.id]
        return gone

    def silence(self, inst, now):
        """Seconds since `inst`'s last heartbeat, less the router's own pauses since then."""
        return now - inst.last_seen - (self.paused_s - inst.paused_mark)

    def _watch(self, now):
        if self.tick_s is not None and self._watched is not None and now - self._watched > 2 * self.tick_s:
            self.paused_s += now - self._watched - self.tick_s
        self._watched = now

    def forget(self, instance_id):
        self.instances.pop(instance_id, None)

    def models(self):
        """{model: live instance count}, each model once, for /v1/models."""
        out = {}
        for inst in self.instances.values():
            if not inst.draining:
                for m in inst.models:
                    out[m] = out.get(m, 0) + 1
        return dict(sorted(out.items()))

    def view(self, now):
        by_model = {}
        for inst in self.instances.values():
            for m in inst.models:
                by_model.setdefault(m, []).append(inst.id)
        return {"instances": [i.view(now) for i in sorted(self.instances.values(), key=lambda i: i.id)],
                "models": {m: sorted(ids) for m, ids in sorted(by_model.items())}}

    def _upsert(self, body, peer, now):
        iid = _instance_id(body)
        models = _models(body)
        address = _address(body, peer)
        load, pressure = _load(body)
        inst = self.instances.get(iid)
        if inst is None:
            if len(self.instances) >= MAX_INSTANCES:
                raise FleetError(f"the fleet is full ({MAX_INSTANCES} instances)", 503)
            inst = self.instances[iid] = Instance(iid, address, models, now)
        inst.address, inst.models, inst.last_seen, inst.load, inst.pressure = address, models, now, load, pressure
        inst.paused_mark = self.paused_s
        return inst


def _instance_id(body):
    if not isinstance(body, dict):
        raise FleetError("the body must be a JSON object")
    iid = body.get("instance")
    if not isinstance(iid, str) or not _ID.fullmatch(iid):
        raise FleetError("`instance`: 1-255 printable ASCII characters without spaces")
    return iid


def _models(body):
    models = body.get("models")
    if not isinstance(models, list) or not 1 <= len(models) <= MAX_MODELS_PER_INSTANCE:
        raise FleetError(f"`models`: a list of 1..{MAX_MODELS_PER_INSTANCE} model ids")
    if not all(isinstance(m, str) and _MODEL.fullmatch(m) for m in models):
        raise FleetError("`models`: each id is 1-128 printable ASCII characters without spaces")
    return tuple(sorted(set(models)))


def _address(body, peer):
    """`address` as given, or the peer's IP with the given `port` (an instance bound to 0.0.0.0)."""
    address = body.get("address")
    if address is None and peer and isinstance(body.get("port"), int):
        host = f"[{peer}]" if ":" in peer else peer
        address = f"{host}:{body['port']}"
    m = _ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if m is None or not 0 < int(m[2]) < 65536:
        raise FleetError("`address`: HOST:PORT the proxy can dial (or `port`, with the caller's IP as host)")
    return address


def _load(body):
    load = body.get("load", {})
    if not isinstance(load, dict):
        raise FleetError("`load`: an object")
    out = {}
    for name in LOAD_FIELDS:
        value = load.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise FleetError(f"`load.{name}`: a non-negative number")
        out[name] = value
    if out["kv_pressure"] > 1:
        raise FleetError("`load.kv_pressure`: a fraction 0..1")
    pressure = load.get("pressure", "OK")
    if pressure not in ("OK", "WATCH", "TIGHT", "CRITICAL"):
        raise FleetError("`load.pressure`: OK, WATCH, TIGHT or CRITICAL")
    return out, pressure
