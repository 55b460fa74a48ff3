"""Prometheus metrics kept in a flat float64 table: one row per process, rendered as the sum of rows.

A Layout fixes, from the served model names and die names, where every series lives in a row, so
every process that builds the same Layout agrees on the table without talking.  The table is a
numpy array over any buffer (a shared-memory segment in the server, plain memory in-process); each
process writes only its own row through a Recorder, and any process renders all rows summed.
Gauges sum too, so each gauge series must have one writer (its owner) and zeros elsewhere.
"""

import math
import threading

import numpy as np

# Prometheus client defaults, in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ENDPOINTS = ("chat_completions", "completions", "tokenize", "detokenize", "embeddings", "rerank")
STATUSES = ("200", "400", "401", "404", "405", "413", "429", "500", "503")
OTHER = "other"  # label for a model, die or status the layout does not name
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "requests_total": ("counter", "Requests answered, by model, endpoint and HTTP status."),
    "prompt_tokens_total": ("counter", "Prompt tokens of finished generations."),
    "cached_tokens_total": ("counter", "Prompt tokens served from a session's KV cache."),
    "completion_tokens_total": ("counter", "Tokens generated."),
    "time_to_first_token_seconds": ("histogram", "Seconds from request arrival to the first token."),
    "inter_token_latency_seconds": ("histogram", "Seconds between consecutive generated tokens."),
    "queue_depth": ("gauge", "Requests waiting for a generation slot."),
    "in_flight": ("gauge", "Generations running on a die."),
}
_COUNTERS = ("prompt_tokens_total", "cached_tokens_total", "completion_tokens_total")
_HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds")


class Layout:
    """Offsets of every series in one row; build it identically in every process sharing a table."""

    def __init__(self, models, dies=(), endpoints=ENDPOINTS, statuses=STATUSES, buckets=BUCKETS):
        self.models = tuple(models) + (OTHER,)
        self.dies = tuple(dies) + (OTHER,)
        self.endpoints, self.statuses = tuple(endpoints), tuple(statuses) + (OTHER,)
        self.buckets = np.asarray(buckets, np.float64)  # [n_buckets]
        m = len(self.models)
        shapes = {"requests_total": (m, len(self.endpoints), len(self.statuses))}
        shapes.update({name: (m,) for name in _COUNTERS + ("queue_depth",)})
        # per model: one count per bucket, the +Inf bucket, then sum and count
        shapes.update({name: (m, len(buckets) + 3) for name in _HISTOGRAMS})
        shapes["in_flight"] = (len(self.dies),)
        self.sections, offset = {}, 0
        for name, shape in shapes.items():
            self.sections[name] = (offset, shape)
            offset += math.prod(shape)
        self.width = offset

    def table(self, n_rows=1, buffer=None):
        """float64 [n_rows, width] zeros, in `buffer` (anything exposing the buffer protocol) if given."""
        if buffer is None:
            return np.zeros((n_rows, self.width), np.float64)  # [n_rows, width]
        return np.ndarray((n_rows, self.width), np.float64, buffer=buffer)  # [n_rows, width]

    def view(self, row, name):
        """The section `name` of one row (or of a summed row), shaped."""
        offset, shape = self.sections[name]
        return row[offset:offset + math.prod(shape)].reshape(shape)

    def index(self, names, value):
        return names.index(value) if value in names else len(names) - 1

    def render(self, rows):
        """Prometheus text format 0.0.4 of `rows` ([n, width] or [width]) summed."""
        total = np.asarray(rows, np.float64).reshape(-1, self.width).sum(axis=0)  # [width]
        out = []
        for name, (kind, text) in _HELP.items():
            out += [f"# HELP pantheon_{name} {text}", f"# TYPE pantheon_{name} {kind}"]
            out += getattr(self, f"_render_{kind}")(name, self.view(total, name))
        return "\n".join(out) + "\n"

    def _render_counter(self, name, values):
        if name == "requests_total":
            return [_line(name, {"model": self.models[m], "endpoint": self.endpoints[e], "status": self.statuses[s]},
                          values[m, e, s]) for m, e, s in zip(*np.nonzero(values))]
        return [_line(name, {"model": model}, v) for model, v in zip(self.models, values)
                if model != OTHER or v]

    def _render_gauge(self, name, values):
        labels = ("die", self.dies) if name == "in_flight" else ("model", self.models)
        return [_line(name, {labels[0]: label}, v) for label, v in zip(labels[1], values)
                if label != OTHER or v]

    def _render_histogram(self, name, values):
        out = []
        for model, hist in zip(self.models, values):
            if model == OTHER and not hist[-1]:
                continue
            cumulative = np.cumsum(hist[:-2])  # [n_buckets + 1]
            les = [_number(b) for b in self.buckets] + ["+Inf"]
            out += [_line(f"{name}_bucket", {"model": model, "le": le}, c) for le, c in zip(les, cumulative)]
            out += [_line(f"{name}_sum", {"model": model}, hist[-2]),
                    _line(f"{name}_count", {"model": model}, hist[-1])]
        return out


class Recorder:
    """Writes one process's row of a table; safe to share between threads of that process."""

    def __init__(self, layout, rows, row=0):
        self.layout, self.rows = layout, rows
        self.row = rows[row]  # [width]
        self._lock = threading.Lock()

    def request(self, model, endpoint, status):
        lay = self.layout
        if endpoint not in lay.endpoints:
            return
        at = (lay.index(lay.models, model), lay.endpoints.index(endpoint), lay.index(lay.statuses, str(status)))
        with self._lock:
            lay.view(self.row, "requests_total")[at] += 1

    def tokens(self, model, prompt, completion, cached=0):
        m = self.layout.index(self.layout.models, model)
        with self._lock:
            for name, n in zip(_COUNTERS, (prompt, cached, completion)):
                self.layout.view(self.row, name)[m] += n

    def ttft(self, model, seconds):
        self._observe("time_to_first_token_seconds", model, seconds, 1)

    def itl(self, model, seconds, count=1):
        """`count` gaps of `seconds` each (tokens that arrived together share the gap evenly)."""
        self._observe("inter_token_latency_seconds", model, seconds, count)

    def queue_depth(self, model, n):
        with self._lock:
            self.layout.view(self.row, "queue_depth")[self.layout.index(self.layout.models, model)] = n

    def in_flight(self, die, n):
        with self._lock:
            self.layout.view(self.row, "in_flight")[self.layout.index(self.layout.dies, die)] = n

    def render(self):
        """Every row of the table this recorder writes into, summed."""
        return self.layout.render(self.rows)

    def _observe(self, name, model, seconds, count):
        hist = self.layout.view(self.row, name)[self.layout.index(self.layout.models, model)]
        bucket = int(np.searchsorted(self.layout.buckets, seconds, side="left"))
        with self._lock:
            hist[bucket] += count
            hist[-2] += seconds * count
            hist[-1] += count


def pressure_lines(level, available, total):
    """The instance's memory pressure as gauges (the supervisor owns them; fronts read the shared record)."""
    return "\n".join([
        "# HELP pantheon_memory_pressure Memory pressure level: 0 OK, 1 WATCH, 2 TIGHT, 3 CRITICAL.",
        "# TYPE pantheon_memory_pressure gauge", f"pantheon_memory_pressure {int(level)}",
        "# HELP pantheon_ram_available_bytes RAM available to the instance (host and cgroup limits).",
        "# TYPE pantheon_ram_available_bytes gauge", f"pantheon_ram_available_bytes {_number(available)}",
        "# HELP pantheon_ram_total_bytes RAM the instance may use in all.",
        "# TYPE pantheon_ram_total_bytes gauge", f"pantheon_ram_total_bytes {_number(total)}"]) + "\n"


def _line(name, labels, value):
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"pantheon_{name}{{{inner}}} {_number(value)}"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value):
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
