"""Run-time load and unload, handled one at a time in the supervisor's main thread."""

import json
import os
import stat
import time
import traceback
from dataclasses import dataclass

from ipc import Kind
from pantheon.errors import PantheonError, UsageError
from workers.tables import SLOT_EMPTY, SLOT_UNLOADING, text

MAX_CTX = 1 << 20
CRITICAL = 3  # pantheon.serve.memory.PressureLevel.CRITICAL, as stored in the instance record
CRITICAL_RETRY_S = 5
MAX_NAME_BYTES = 64     # the slot record's name field (workers/tables.py, S64)
MAX_PATH_BYTES = 1024   # the slot record's path field (S1024), checked on the resolved path too


class Refusal(Exception):
    """An admin request refused before anything changed: HTTP status, OpenAI-style code, message, extras."""

    def __init__(self, status, code, message, **extra):
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra

    def body(self):
        return {"error": {"message": str(self), "type": "invalid_request_error", "code": self.code,
                          "param": None, **self.extra}}


@dataclass
class PendingUnload:
    front: int
    rid: int
    slot: int
    deadline: float
    sent: bool = False


class AdminDesk:
    """LOAD: validate, confine, estimate, admit, place. UNLOAD: drain, then drop. Replies via the dispatcher."""

    def __init__(self, sup):
        self.sup = sup
        self.unloads = []

    def take(self, front, rid, kind, payload):
        try:
            body = json.loads(payload)
            if not isinstance(body, dict):
                raise Refusal(400, "invalid_request", "the body must be a JSON object")
            if kind == Kind.LOAD:
                self._post_reply(front, rid, self._load(body))
            else:
                self._unload(front, rid, body)
        except Refusal as r:
            self._post_refusal(front, rid, r)
        except (ValueError, TypeError) as e:
            self._post_refusal(front, rid, Refusal(400, "invalid_request", f"malformed admin request: {e}"))
        except Exception as e:  # the supervisor's main loop outlives any admin request
            traceback.print_exc()
            self._post_refusal(front, rid, Refusal(500, "admin_error", f"the admin operation failed: "
                                                                       f"{type(e).__name__}: {str(e)[:300]}"))

    def _post_reply(self, front, rid, body):
        d = self.sup.dispatcher
        d.commands.put(lambda: d.reply(front, rid, body))

    def _post_refusal(self, front, rid, refusal):
        d = self.sup.dispatcher
        d.commands.put(lambda: d.refuse(front, rid, refusal.status, refusal.body()))

    def _load(self, body):
        spec, batch_slots = self._spec(body)
        self._admit(spec, batch_slots)
        try:
            slot = self.sup.book.add_runtime(spec, batch_slots, self.sup.layout.tables)
        except UsageError as e:
            raise Refusal(409, "no_free_slot", str(e)) from None
        for d in self.sup.book.dies_of(slot):
            if d in self.sup.workers.values():
                self.sup.dispatcher.commands.put(lambda d=d: self.sup.dispatcher.send_to_die(d, Kind.LOAD, slot))
            else:
                self.sup.spawn_worker(d)
        return {"slot": slot}

    def _spec(self, body):
        from pantheon.serve.settings import ModelSpec

        path = self._confined(_fits("path", _field(body, "path", str), MAX_PATH_BYTES))
        config = _field(body, "config", str, None)
        config = self._confined(_fits("config", config, MAX_PATH_BYTES), "config") if config else ""
        name = _fits("name", _field(body, "name", str, os.path.basename(path)) or os.path.basename(path),
                     MAX_NAME_BYTES)
        if any(text(rec["name"]) == name for _, rec in self.sup.layout.tables.live_slots()):
            raise Refusal(409, "name_exists", f"a model named {name!r} is already served; unload it first")
        dies = _field(body, "dies", (list, str), ["cpu0"])
        dies = tuple(dies.split(",") if isinstance(dies, str) else dies)
        known = {d.name for d in self.sup.die_list}
        bad = [d for d in dies if d not in known]
        if bad or not dies:
            raise Refusal(400, "invalid_value", f"dies {bad or dies}: no such die; available: {', '.join(sorted(known))}",
                          param="dies")
        ctx = _bounded(body, "ctx_cap", 0, MAX_CTX, 0)
        slots = _bounded(body, "batch_slots", 1, 8, self.sup.config.batch_slots)
        return ModelSpec(path, name, dies, ctx, 0, 8, 8, config=config), slots

    def _confined(self, path, param="path"):
        """The real path of `path` (a file, or an HF model directory); inside --models-dir when one is
        set (no traversal, no symlink escape)."""
        root = self.sup.config.models_dir
        full = os.path.realpath(os.path.join(root, path) if root else path)
        if root and os.path.commonpath([full, os.path.realpath(root)]) != os.path.realpath(root):
            raise Refusal(400, "path_outside_models_dir", f"{param} {path!r} resolves outside --models-dir", param=param)
        try:
            st = os.stat(full)
        except (OSError, ValueError):
            st = None
        # /proc/self/mem and friends are "regular" files of size 0, and mapping them is no model load
        if st is None or not (stat.S_ISREG(st.st_mode) and st.st_size > 0
                              or param == "path" and stat.S_ISDIR(st.st_mode)):
            raise Refusal(400, "invalid_path", f"{param} {path!r} is not a readable model file", param=param)
        return _fits(param, full, MAX_PATH_BYTES)

    def _admit(self, spec, slots):
        """Pre-flight: open the header (typed errors become 400), check the memory estimate (409 when it
        does not fit), and refuse any load while pressure is CRITICAL (503), as docs/memory.md says."""
        from pantheon.source import model_config

        try:
            model_config(spec.path, spec.config or None)
        except (PantheonError, OSError, ValueError) as e:
            raise Refusal(400, "invalid_model", str(e), param="path") from None
        verdict = self.sup.fit_verdict(spec.path, spec.dies, spec.ctx_cap or 4096, slots, spec.max_sessions,
                                       config=spec.config or None)
        if verdict.kind in ("DOES-NOT-FIT", "REFUSED"):
            raise Refusal(409, "does_not_fit", f"{spec.name} does not fit: {verdict.reason}",
                          estimate=_numbers(verdict))
        if self.sup.layout.tables.instance[0]["pressure"] >= CRITICAL:
            raise Refusal(503, "memory_pressure", "memory pressure is CRITICAL: loads are refused until it eases",
                          retry_after=CRITICAL_RETRY_S)

    def _unload(self, front, rid, body):
        name = _field(body, "name", str, None)
        slot = _field(body, "slot", int, None)
        timeout = _bounded(body, "timeout", 0, 3600, 30)
        found = [(i, rec) for i, rec in self.sup.layout.tables.live_slots()
                 if (name is not None and text(rec["name"]) == name) or i == slot]
        if not found or found[0][1]["state"] == SLOT_UNLOADING:
            raise Refusal(404, "model_not_found", f"no served model {name if name is not None else slot!r}")
        i = found[0][0]
        self.sup.layout.tables.write_slot(i, state=SLOT_UNLOADING)
        self.unloads.append(PendingUnload(front, rid, i, time.monotonic() + timeout))

    def tick(self):
        """Finish unloads whose requests drained or whose grace ran out."""
        for u in list(self.unloads):
            if u.sent:
                continue
            drained = self.sup.dispatcher.slot_in_flight(u.slot) == 0
            if drained or time.monotonic() >= u.deadline:
                u.sent = True
                self._finish_unload(u)

    def _finish_unload(self, u):
        d, dies = self.sup.dispatcher, self.sup.book.dies_of(u.slot)

        def on_dispatcher():
            aborted = d.unload_slot(u.slot, dies)
            self.sup.main_inbox.put(lambda: self._emptied(u, aborted))

        d.commands.put(on_dispatcher)

    def _emptied(self, u, aborted):
        tables = self.sup.layout.tables
        model = self.sup.describe_slot(u.slot)
        tables.write_slot(u.slot, state=SLOT_EMPTY, name="", path="", dies=0, reason="", split="")
        self.sup.book.remove(u.slot)
        self.unloads.remove(u)
        self._post_reply(u.front, u.rid, {"model": {**model, "state": "unloaded"}, "aborted": aborted})


def _field(body, key, kinds, default=...):
    if key not in body or body[key] is None:
        if default is ...:
            raise Refusal(400, "missing_field", f"{key!r} is required", param=key)
        return default
    if not isinstance(body[key], kinds) or isinstance(body[key], bool):
        raise Refusal(400, "invalid_type", f"{key!r} has the wrong type", param=key)
    return body[key]


def _fits(key, value, limit):
    """`value` when its UTF-8 fits the slot record's fixed-width field; a 400 naming `key`, never a
    silent truncation (a truncated path opened another file; truncated names collided)."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise Refusal(400, "invalid_value", f"{key!r} is {size} bytes; at most {limit} fit", param=key)
    return value


def _bounded(body, key, lo, hi, default):
    value = _field(body, key, int, default)
    if not lo <= value <= hi:
        raise Refusal(400, "invalid_value", f"{key!r} = {value} is outside {lo}..{hi}", param=key)
    return value


def _numbers(verdict):
    return {k: int(v) if isinstance(v, (int, float)) else v for k, v in dict(verdict.numbers).items()}

