"""Model slots of the instance: one per served name, its replicas' dies, its state derived from the dies.

A slot's facts are a ModelSpec (pantheon.serve.settings: the --model parsers and limits) plus the
sequences decoded together and whether weights are quantized; `record` is the one place that turns
them into the shared table's fields, `spec_of` the one place that reads them back."""

import dataclasses
import functools
import itertools
import time

from pantheon.errors import UsageError
from pantheon.gguf.config import POOLING_TYPES
from pantheon.serve.limits import DEFAULT_CTX_CAP
from pantheon.serve.settings import ModelSpec, batch_slots_of, context_size
from pantheon.source import model_config
from workers.tables import (DIE_FAILED, DIE_UP, MAX_SLOTS, SLOT_EMPTY, SLOT_FAILED, SLOT_LOADED, SLOT_LOADING,
                            SLOT_STATES, SLOT_UNLOADING, text)


def placement(names, index):
    """(die mask, split text) of one --model's dies: several CUDA dies split its layers (one worker, the
    first die, drives them all), several CPU dies are replicas."""
    if len(names) > 1 and all(n.startswith("cuda") for n in names):
        return 1 << index[names[0]], "+".join(names)
    return sum(1 << index[n] for n in names), ""


def _join(a, b):
    return ",".join(t for t in (a, b) if t)


class SlotBook:
    """Built from the ServeConfig: `--model` entries sharing a `--name` become one slot with several dies."""

    def __init__(self, config, die_list):
        index = {d.name: i for i, d in enumerate(die_list)}
        self.config, self.slots, self.die_list = config, [], die_list
        self.serials = itertools.count(1)  # the slot table's `serial`: one per placement of a model
        for spec in config.models:
            self._add(spec, *placement(spec.dies or ("cpu0",), index))
        if len(self.slots) > MAX_SLOTS:
            raise UsageError(f"{len(self.slots)} models exceed the {MAX_SLOTS} slots")

    def _add(self, spec, mask, split):
        for s in self.slots:
            if s["name"] == spec.name:
                if s["path"] != spec.path:
                    raise UsageError(f"--name {spec.name!r} names two different files: {s['path']} and {spec.path}")
                s["dies"] |= mask
                s["split"] = _join(s["split"], split)
                return
        self.slots.append(record(spec, mask, split, batch_slots_of(spec, self.config.batch_slots),
                                 self.config.quantize))

    def add_runtime(self, spec, batch_slots, tables):
        """A model loaded through the admin API: the first free slot, published as loading."""
        free = [i for i, s in enumerate(self.slots) if s is None]
        if not free and len(self.slots) >= MAX_SLOTS:
            raise UsageError(f"all {MAX_SLOTS} model slots are in use")
        i = free[0] if free else len(self.slots)
        index = {d.name: n for n, d in enumerate(self.die_list)}
        fields = record(spec, *placement(spec.dies, index), batch_slots, self.config.quantize)
        if i == len(self.slots):
            self.slots.append(fields)
        else:
            self.slots[i] = fields
        tables.write_slot(i, state=SLOT_LOADING, created=int(time.time()), reason="", serial=next(self.serials),
                          **fields)
        return i

    def remove(self, i):
        self.slots[i] = None

    def dies_of(self, i):
        return [d for d in range(64) if self.slots[i] is not None and self.slots[i]["dies"] >> d & 1]

    def publish(self, tables):
        now = int(time.time())
        for i, s in enumerate(self.slots):
            tables.write_slot(i, state=SLOT_LOADING, created=now, reason="", serial=next(self.serials), **s)

    def used_dies(self):
        return sorted({d for s in self.slots if s for d in range(64) if s["dies"] >> d & 1})

    def slots_on(self, d):
        return [i for i, s in enumerate(self.slots) if s and s["dies"] >> d & 1]

    def settled(self, rec, d):
        """The worker of die `d` has tried every model placed on it."""
        mask = sum(1 << i for i in self.slots_on(d))
        return rec["heartbeat"] > 0 and (int(rec["loaded"]) | int(rec["failed"])) & mask == mask

    def refresh(self, tables, notes):
        """Derive each slot's state from its dies; failure reasons come from the workers' notes.
        Returns (name, state) of every slot whose state changed."""
        reasons = {slot: msg for _, slot, msg in notes}
        changed = []
        for i, s in enumerate(self.slots):
            rec = tables.read_slot(i)
            if s is None or rec["state"] in (SLOT_UNLOADING, SLOT_EMPTY):
                continue
            state = self._state(tables, i, s["dies"])
            if state != rec["state"]:
                reason = reasons.get(i, text(rec["reason"])) if state == SLOT_FAILED else ""
                tables.write_slot(i, state=state, reason=reason)
                changed.append((s["name"], state))
            elif state == SLOT_FAILED and i in reasons and not text(rec["reason"]):
                tables.write_slot(i, reason=reasons[i])  # the die's failed bit was seen before its note came
        return changed

    def _state(self, tables, i, mask):
        dies = [tables.dies[d] for d in range(len(tables.dies)) if mask >> d & 1]
        if any(r["state"] == DIE_UP and int(r["loaded"]) >> i & 1 for r in dies):
            return SLOT_LOADED
        if all(r["state"] == DIE_FAILED or int(r["failed"]) >> i & 1 for r in dies):
            return SLOT_FAILED
        return SLOT_LOADING

    def die_failed(self, tables, d, detail, notes=()):
        """Slots left with no live die fail; the reason is the die's own word on the slot (its load
        error) when it sent one, else `detail` (how its worker exited)."""
        reasons = {slot: msg for die, slot, msg in notes if die == d}
        for i in self.slots_on(d):
            if self._state(tables, i, self.slots[i]["dies"]) == SLOT_FAILED:
                # a load error already recorded (refresh saw the note first) outranks the exit status
                known = text(tables.read_slot(i)["reason"])
                tables.write_slot(i, state=SLOT_FAILED, reason=reasons.get(i) or known or detail)


def record(spec, mask, split, batch_slots, quantize):
    """The slot table fields of `spec` placed on the dies of bit `mask` (`split`: its CUDA layer-split
    groups, see placement)."""
    return dict(name=spec.name, path=spec.path, config=spec.config, dies=mask, split=split, ctx_cap=spec.ctx_cap,
                batch_slots=batch_slots, max_sessions=spec.max_sessions, max_concurrent=spec.max_concurrent,
                reasoning_budget=spec.reasoning_budget, quantize=int(quantize),
                pooling=POOLING_TYPES.index(spec.pooling) + 1 if spec.pooling else 0)


def spec_of(rec, die_names):
    """(ModelSpec, batch_slots, quantize) of a slot table record; `die_names` by die index. A layer
    split's dies are its first group, each GPU's share being what a fit check weighs."""
    split = text(rec["split"])
    dies = tuple(split.split(",")[0].split("+")) if split else die_names_of(rec, die_names)
    spec = ModelSpec(text(rec["path"]), text(rec["name"]), dies, int(rec["ctx_cap"]), int(rec["reasoning_budget"]),
                     int(rec["max_sessions"]), int(rec["max_concurrent"]), config=text(rec["config"]),
                     pooling=pooling_of(rec))
    return spec, int(rec["batch_slots"]), bool(rec["quantize"])


def pooling_of(rec):
    """The slot's --pooling, '' when it keeps the GGUF's."""
    code = int(rec["pooling"])
    return POOLING_TYPES[code - 1] if 0 < code <= len(POOLING_TYPES) else ""


def with_pooling(config, rec):
    """`config` (a ModelConfig) with the slot's --pooling in place of the file's, where one is given."""
    pooling = pooling_of(rec)
    return dataclasses.replace(config, pooling=pooling) if pooling else config


def describe(i, rec, die_names, in_flight):
    """The /admin/models record of slot `i` (`in_flight`: its requests running or queued)."""
    return {"slot": i, "name": text(rec["name"]), "path": text(rec["path"]), "dies": die_names_of(rec, die_names),
            "split": [g.split("+") for g in text(rec["split"]).split(",") if g],
            "state": SLOT_STATES[rec["state"]], "reason": text(rec["reason"]), "in_flight": int(in_flight),
            "ctx": slot_context(text(rec["path"]), text(rec["config"]), int(rec["ctx_cap"]), int(rec["version"]))}


def die_names_of(rec, die_names):
    """The names, of `die_names`, of the dies slot record `rec` is placed on."""
    return [n for d, n in enumerate(die_names) if int(rec["dies"]) >> d & 1]


@functools.lru_cache(maxsize=256)
def slot_context(path, config, ctx_cap, version):
    """The context a slot really serves (what the engine gets), read from the model's header once per
    slot version; the cap alone when the file cannot be read (its slot state already says why)."""
    try:
        return context_size(ctx_cap, model_config(path, config or None).n_ctx_train)
    except Exception:
        return ctx_cap or DEFAULT_CTX_CAP
