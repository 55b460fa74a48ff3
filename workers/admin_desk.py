"""Run-time load and unload, handled one at a time in the supervisor's main thread."""

import json
import os
import stat
import time
import traceback
from dataclasses import dataclass

from pantheon.errors import PantheonError, UsageError
from pantheon.serve.memory import PressureLevel
from pantheon.serve.settings import batch_slots_of, model_spec, parse_flag
from pantheon.source import model_config
from workers.commands import AdminReply, EmptySlot
from workers.dispatcher import CRITICAL_RETRY_S
from workers.protocol import Kind
from workers.slots import describe
from workers.tables import SLOT_EMPTY, SLOT_UNLOADING, text

# Admin load body fields and the per-model flags whose parsers read them.
ADMIN_FIELDS = {"name": "--name", "dies": "--dies", "ctx_cap": "--ctx-cap", "reasoning_budget": "--reasoning-budget",
                "max_sessions": "--max-sessions", "max_concurrent": "--max-concurrent", "pooling": "--pooling"}


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
    """LOAD: validate, confine, estimate, admit, place. UNLOAD: drain, then drop. Replies via the dispatcher.

    Its collaborators, all owned by the supervisor: `post` puts a workers.commands message on the
    dispatcher's queue; `admission(spec, batch_slots)` is the fit verdict; `load_slot(slot)` starts a new
    slot on its dies (a live worker loads it, a stopped one is forked); `in_flight(slot)` counts the
    requests still running or queued on a slot."""

    def __init__(self, config, die_list, tables, book, post, admission, load_slot, in_flight):
        self.config, self.die_list, self.tables, self.book = config, die_list, tables, book
        self.post, self.admission, self.load_slot, self.in_flight = post, admission, load_slot, in_flight
        self.unloads = []

    def take(self, front, rid, kind, payload):
        try:
            body = json.loads(payload)
            if not isinstance(body, dict):
                raise Refusal(400, "invalid_request", "the body must be a JSON object")
            if kind == Kind.ADMIN_LOAD:
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
        self.post(AdminReply(front, rid, 200, body))

    def _post_refusal(self, front, rid, refusal):
        self.post(AdminReply(front, rid, refusal.status, refusal.body()))

    def _load(self, body):
        spec, batch_slots = self._spec(body)
        self._admit(spec, batch_slots)
        try:
            slot = self.book.add_runtime(spec, batch_slots, self.tables)
        except UsageError as e:
            raise Refusal(409, "no_free_slot", str(e)) from None
        self.load_slot(slot)
        return {"slot": slot}

    def _spec(self, body):
        """(ModelSpec, batch_slots) from the body, through the parsers and defaults of `--model`."""
        values = {"--model": self._parse("--model", "path", self._confined(_field(body, "path", str)))}
        if body.get("config") is not None:
            config = self._confined(_field(body, "config", str), "config")
            values["--config"] = self._parse("--config", "config", config)
        for key, flag in ADMIN_FIELDS.items():
            if body.get(key) is not None:
                values[flag] = self._parse(flag, key, _flag_text(body, key))
        try:
            spec = model_spec(values)
        except UsageError as e:  # no --name, and the file name is no model id (e.g. '/' or 'a b')
            raise Refusal(400, "invalid_value", str(e), param="name") from None
        if any(text(rec["name"]) == spec.name for _, rec in self.tables.live_slots()):
            raise Refusal(409, "name_exists", f"a model named {spec.name!r} is already served; unload it first")
        known = {d.name for d in self.die_list}
        bad = [d for d in spec.dies if d not in known]
        if bad:
            raise Refusal(400, "invalid_value", f"dies {bad}: no such die; available: {', '.join(sorted(known))}",
                          param="dies")
        batch = self.config.batch_slots
        if body.get("batch_slots") is not None:
            batch = self._parse("--batch-slots", "batch_slots", _flag_text(body, "batch_slots"))
        return spec, batch_slots_of(spec, batch)

    @staticmethod
    def _parse(flag, key, value):
        try:
            return parse_flag(flag, value, label=key)
        except UsageError as e:
            raise Refusal(400, "invalid_value", str(e), param=key) from None

    def _confined(self, path, param="path"):
        """The real path of `path` (a file, or an HF model directory); inside --models-dir when one is
        set (no traversal, no symlink escape)."""
        root = self.config.models_dir
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
        return full

    def _admit(self, spec, slots):
        """Pre-flight: open the header (typed errors become 400), check the memory estimate (409 when it
        does not fit), and refuse any load while pressure is CRITICAL (503), as docs/memory.md says."""
        try:
            model_config(spec.path, spec.config or None)
        except (PantheonError, OSError, ValueError) as e:
            raise Refusal(400, "invalid_model", str(e), param="path") from None
        verdict = self.admission(spec, slots)
        if verdict.kind in ("DOES-NOT-FIT", "REFUSED"):
            raise Refusal(409, "does_not_fit", f"{spec.name} does not fit: {verdict.reason}",
                          estimate=_numbers(verdict))
        if self.tables.instance[0]["pressure"] >= PressureLevel.CRITICAL:
            raise Refusal(503, "memory_pressure", "memory pressure is CRITICAL: loads are refused until it eases",
                          retry_after=CRITICAL_RETRY_S)

    def _unload(self, front, rid, body):
        name = _field(body, "name", str, None)
        slot = _field(body, "slot", int, None)
        timeout = _bounded(body, "timeout", 0, 3600, 30)
        found = [(i, rec) for i, rec in self.tables.live_slots()
                 if (name is not None and text(rec["name"]) == name) or i == slot]
        if not found or found[0][1]["state"] == SLOT_UNLOADING:
            raise Refusal(404, "model_not_found", f"no served model {name if name is not None else slot!r}")
        i = found[0][0]
        self.tables.write_slot(i, state=SLOT_UNLOADING)
        self.unloads.append(PendingUnload(front, rid, i, time.monotonic() + timeout))

    def tick(self):
        """Finish unloads whose requests drained or whose grace ran out."""
        for u in list(self.unloads):
            if u.sent:
                continue
            drained = self.in_flight(u.slot) == 0
            if drained or time.monotonic() >= u.deadline:
                u.sent = True
                self._finish_unload(u)

    def _finish_unload(self, u):
        self.post(EmptySlot(u.slot, tuple(self.book.dies_of(u.slot))))

    def emptied(self, msg):
        """The dispatcher's SlotEmptied: the slot's requests are gone; free it and answer the unload."""
        u = next(u for u in self.unloads if u.slot == msg.slot and u.sent)
        model = describe(u.slot, self.tables.read_slot(u.slot), [d.name for d in self.die_list], self.in_flight(u.slot))
        self.tables.write_slot(u.slot, state=SLOT_EMPTY, name="", path="", dies=0, reason="", split="")
        self.book.remove(u.slot)
        self.unloads.remove(u)
        self._post_reply(u.front, u.rid, {"model": {**model, "state": "unloaded"}, "aborted": msg.aborted})


def _field(body, key, kinds, default=...):
    if key not in body or body[key] is None:
        if default is ...:
            raise Refusal(400, "missing_field", f"{key!r} is required", param=key)
        return default
    if not isinstance(body[key], kinds) or isinstance(body[key], bool):
        raise Refusal(400, "invalid_type", f"{key!r} has the wrong type", param=key)
    return body[key]


def _flag_text(body, key):
    """A JSON value as the text its command-line flag takes: numbers as decimals, lists comma-joined."""
    value = body[key]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise Refusal(400, "invalid_type", f"{key!r} has the wrong type", param=key)


def _bounded(body, key, lo, hi, default):
    value = _field(body, key, int, default)
    if not lo <= value <= hi:
        raise Refusal(400, "invalid_value", f"{key!r} = {value} is outside {lo}..{hi}", param=key)
    return value


def _numbers(verdict):
    return {k: int(v) if isinstance(v, (int, float)) else v for k, v in dict(verdict.numbers).items()}

