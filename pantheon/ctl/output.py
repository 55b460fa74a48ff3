"""pantheon-ctl's human-readable output: aligned tables and one-line summaries of admin answers."""

import dataclasses
import json
from collections.abc import Mapping

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
MISSING = "-"


def table(headers, rows):
    """Columns aligned by two spaces; no trailing spaces; every cell made printable."""
    cells = [[cell(v) for v in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def cell(value):
    """A table cell: None is '-', lists are comma-joined, control characters are escaped."""
    if value is None or value == "" or value == []:
        return MISSING
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value)
    text = str(value)
    return text if text.isprintable() else ascii(text)[1:-1]


def human_bytes(n):
    """1536 -> '1.5 KiB'; whole bytes below 1 KiB."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return MISSING
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def to_json(obj):
    """Indented JSON of a payload (dataclasses and mappings of other modules included)."""
    return json.dumps(jsonable(obj), indent=2) + "\n"


def jsonable(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "_asdict"):
        return jsonable(obj._asdict())
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "value") and isinstance(obj.value, (str, int)):   # enum members
        return obj.value
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


# ---- /admin/models


MODEL_HEADERS = ("NAME", "STATE", "DIES", "IN-FLIGHT", "CTX", "PATH")


def models_table(payload):
    """The `list` table, by slot; a model with a reason (say, why it failed) gets a line below."""
    models = sorted(_entries(payload, "models"), key=lambda m: _sort_int(m.get("slot")))
    if not models:
        return "no models\n"
    rows = [(m.get("name"), m.get("state"), m.get("dies"), m.get("in_flight"), m.get("ctx"), m.get("path"))
            for m in models]
    notes = [f"{cell(m.get('name'))}: {cell(m.get('state'))}: {cell(m['reason'])}\n"
             for m in models if m.get("reason")]
    return table(MODEL_HEADERS, rows) + "".join(notes)


def model_line(verb, model):
    """'loaded small on cpu0,cpu1 (slot 1, ctx 4096, loaded)'."""
    return (f"{verb} {cell(model.get('name'))} on {cell(model.get('dies'))} (slot {cell(model.get('slot'))}, "
            f"ctx {cell(model.get('ctx'))}, {cell(model.get('state'))})\n")


def unloaded_line(payload):
    model = payload.get("model") if isinstance(payload.get("model"), dict) else {}
    aborted = payload.get("aborted")
    return f"unloaded {cell(model.get('name'))} ({cell(aborted)} in-flight request(s) aborted)\n"


# ---- /admin/dies


DIE_HEADERS = ("DIE", "KIND", "STATE", "PID", "RESTARTS", "IN-FLIGHT", "MODELS", "MEMORY")


def dies_table(payload):
    dies = _entries(payload, "dies")
    rows = [(d.get("name"), d.get("kind"), d.get("state"), d.get("pid") or None, d.get("restarts"),
             d.get("in_flight"), d.get("models"), die_memory(d)) for d in dies]
    text = table(DIE_HEADERS, rows) if dies else "no dies\n"
    return text + pressure_line(payload.get("pressure"))


def die_memory(die):
    """CPU dies show free RAM, CUDA dies used VRAM: the number an operator watches on each."""
    vram, ram = die.get("vram"), die.get("ram")
    if isinstance(vram, dict):
        return f"vram {human_bytes(vram.get('used'))} used of {human_bytes(vram.get('total'))}"
    if isinstance(ram, dict):
        return f"ram {human_bytes(ram.get('available'))} free of {human_bytes(ram.get('total'))}"
    return None


def pressure_line(pressure):
    if not isinstance(pressure, dict):
        return ""
    rest = " ".join(f"{cell(k)}={cell(v)}" for k, v in pressure.items() if k != "level")
    return f"pressure: {cell(pressure.get('level'))}" + (f" ({rest})" if rest else "") + "\n"


# ---- /health


HEALTH_HEADERS = ("NAME", "STATE", "REPLICAS", "CTX", "RUNNING", "QUEUED")


def health_table(payload):
    """/health's models come as {name: {...}} (docs/http-api.md) or as a list of {name, ...}."""
    models = payload.get("models")
    if isinstance(models, Mapping):
        models = [{"name": k, **(v if isinstance(v, Mapping) else {})} for k, v in models.items()]
    models = [m for m in models if isinstance(m, Mapping)] if isinstance(models, list) else []
    rows = [(m.get("name"), m.get("state"), m.get("replicas"), _first(m, "n_ctx", "ctx"),
             _first(m, "running", "in_flight"), m.get("queued")) for m in models]
    head = f"status: {cell(payload.get('status'))}\n"
    return head + (table(HEALTH_HEADERS, rows) if rows else "no models\n")


# ---- errors and fit numbers


def numbers_lines(numbers, indent="  "):
    """One aligned line per number of a memory estimate (all bytes): '  weights  4.3 MiB (4,521,984 bytes)'."""
    items = jsonable(numbers)
    if not isinstance(items, dict) or not items:
        return ""
    width = max(len(cell(k)) for k in items)
    human = {k: _bytes(v) for k, v in items.items()}
    unit_width = max(len(h) for h, _ in human.values())
    return "".join(f"{indent}{cell(k).ljust(width)}  {h.rjust(unit_width)}{raw}\n" for k, (h, raw) in human.items())


def _bytes(value):
    if isinstance(value, bool) or not isinstance(value, int):
        return cell(value), ""
    return human_bytes(value), f" ({value:,} bytes)"


def _entries(payload, key):
    items = payload.get(key)
    return [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []


def _first(mapping, *keys):
    return next((mapping[k] for k in keys if mapping.get(k) is not None), None)


def _sort_int(value):
    return value if isinstance(value, int) else 1 << 62
