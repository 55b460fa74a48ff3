"""The admin API inside a front: reads the shared tables, asks the supervisor to load and unload."""

import json
import queue
import time

from pantheon.serve.fit import estimate_load
from pantheon.serve.http.admin import AdminRefused
from workers.protocol import Kind
from workers.slots import describe, spec_of
from workers.tables import DIE_STATES, PRESSURE_LEVELS, SLOT_FAILED, SLOT_LOADED, SLOT_STATES, text

MAX_TIMEOUT_S = 3600


class _Mailbox:
    """Receives the supervisor's one reply to an admin request."""

    cancelled = False

    def __init__(self, events):
        self.events = events
        self.ended = False


class RingAdmin:
    """The admin API inside a front: reads the shared tables, asks the supervisor to load and unload."""

    def __init__(self, backend):
        self.backend, self.tables, self.layout = backend, backend.tables, backend.layout
        self._estimates = {}

    def _die_names(self, mask):
        return [d.name for i, d in enumerate(self.layout.die_list) if int(mask) >> i & 1]

    def describe(self, i, rec):
        return {**describe(i, rec, [d.name for d in self.layout.die_list], self.tables.slot_in_flight[i]),
                "memory": self._memory(i, rec)}

    def _memory(self, i, rec):
        """The estimator's parts for this slot (bytes), computed once per slot version from the GGUF header."""
        key = (i, int(rec["version"]))
        if key not in self._estimates:
            try:
                spec, batch_slots, quantize = spec_of(rec, [d.name for d in self.layout.die_list])
                est = estimate_load(spec, batch_slots, quantize)
                self._estimates[key] = {k: int(v) for k, v in est.parts().items()}
            except Exception as e:  # an unreadable file is already reported by the slot's state
                self._estimates[key] = {"error": str(e)}
        return self._estimates[key]

    def admin_models(self):
        return [self.describe(i, rec) for i, rec in self.tables.live_slots()]

    def admin_dies(self):
        inst = self.tables.instance[0]
        out = []
        for i, die in enumerate(self.layout.die_list):
            rec = self.tables.dies[i]
            models = [text(r["name"]) for _, r in self.tables.live_slots() if int(r["dies"]) >> i & 1]
            out.append({"name": die.name, "kind": die.kind, "cores": list(die.cores or ()),
                        "gpu": {"name": die.device_name, "uuid": die.uuid} if die.kind == "cuda" else None,
                        "ram": {"total": int(inst["ram_total"]), "available": int(inst["ram_available"])},
                        "vram": None, "models": models, "pid": int(rec["pid"]), "restarts": int(rec["restarts"]),
                        "in_flight": int(rec["in_flight"]), "state": DIE_STATES[rec["state"]]})
        return {"dies": out, "pressure": {"level": PRESSURE_LEVELS[inst["pressure"]],
                                          "ram_available": int(inst["ram_available"])}}

    def _ask(self, kind, body, timeout):
        """Send an admin request to the supervisor and wait for its ADMIN_REPLY (HTTP status, JSON body)."""
        payload = json.dumps(body).encode()
        if len(payload) > self.backend.max_job:  # one ring message carries it; the body limit allows more
            raise AdminRefused(413, _admin_error(f"the admin request is {len(payload)} bytes, over the "
                                                 f"{self.backend.max_job} bytes it may take to the supervisor",
                                                 "request_too_large"))
        rid = self.backend.new_id()
        reply = queue.Queue()
        self.backend.register(rid, _Mailbox(reply))
        try:
            self.backend.send(kind, rid, payload)
            msg = reply.get(timeout=timeout)
        except queue.Empty:
            raise AdminRefused(504, _admin_error("the supervisor did not answer in time", "timeout")) from None
        finally:
            self.backend.forget(rid)
        reply = json.loads(bytes(msg.payload))
        if reply["status"] != 200:
            raise AdminRefused(reply["status"], reply["body"])
        return reply["body"]

    def admin_load(self, body):
        """Block until the model is loaded (200 {"model"}), failed (422) or the timeout passed (504)."""
        for event in self.load_progress(body):
            final = event
        return final

    def load_progress(self, body):
        """Yield {"state", "elapsed_s"} about every half second while loading, then the final {"model"}.
        Refusals and failures raise AdminRefused (before the first event when refused up front)."""
        timeout = _timeout(body, 600)
        started = time.monotonic()
        slot = self._ask(Kind.ADMIN_LOAD, body, 60)["slot"]
        next_report = 0.0
        while time.monotonic() - started < timeout:
            rec = self.tables.read_slot(slot)
            if rec["state"] == SLOT_LOADED:
                yield {"model": self.describe(slot, rec)}
                return
            if rec["state"] == SLOT_FAILED:
                raise AdminRefused(422, _admin_error(f"the model could not be loaded: {text(rec['reason'])}",
                                                     "load_failed", model=self.describe(slot, rec)))
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + 0.5
                yield {"state": SLOT_STATES[rec["state"]], "elapsed_s": round(time.monotonic() - started, 2)}
            time.sleep(0.05)
        raise AdminRefused(504, _admin_error(f"still loading after {timeout} s", "timeout"))

    def admin_unload(self, body):
        timeout = _timeout(body, 30)
        return self._ask(Kind.ADMIN_UNLOAD, body, timeout + 60)


def _timeout(body, default):
    """The request's "timeout" in seconds, 0..3600; anything else is a 400 (never a 504 straight away)."""
    value = body.get("timeout")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT_S:
        raise AdminRefused(400, _admin_error(f"timeout: expected whole seconds in 0..{MAX_TIMEOUT_S}, got "
                                             f"{json.dumps(value)[:40]}", "invalid_value", param="timeout"))
    return value


def _admin_error(message, code, **extra):
    return {"error": {"message": message, "type": "invalid_request_error", "code": code, "param": None, **extra}}
