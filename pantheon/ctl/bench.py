"""`pantheon-ctl bench MODEL`: prompt-processing and generation tokens/s at 1..N concurrent streams
against a running server; a table, a JSON last line, and a PNG chart (matplotlib, optional)."""

import json
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from pantheon import __version__
from pantheon.ctl import api, catalog
from pantheon.ctl.output import table
from pantheon.errors import PantheonError
from pantheon.source import model_config

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau"


@dataclass
class Row:
    """One concurrency level; per-stream figures are means, aggregates are over the wall clock."""

    streams: int
    ok: int
    prompt_tokens: int           # per stream, as the server counted them
    gen_tokens: float            # mean per stream
    ttft_s: float                # mean time to first token
    pp_tps: float                # prompt tokens / time to first token, per stream (mean)
    tg_tps: float                # (tokens - 1) / (end - first token), per stream (mean)
    total_tps: float             # all generated tokens / wall seconds
    wall_s: float


def levels(n):
    """1, 2, 4, ... up to n, and n itself."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


def prompt_of(client, model, tokens):
    """A prompt of about `tokens` tokens (by the server's /tokenize), different per call so the
    prefix cache cannot serve it."""
    per = len((client.post("/tokenize", {"model": model, "content": WORDS}).body or {}).get("tokens", [])) or 19
    return " ".join([WORDS] * max(1, tokens // per))


def one_stream(client, model, prompt, gen_tokens, tag):
    body = {"model": model, "prompt": f"{tag} {prompt}", "max_tokens": gen_tokens, "temperature": 0,
            "stream_options": {"include_usage": True}}
    return client.stream("/v1/completions", body)


def measure(client, model, streams, prompt, gen_tokens):
    start = time.monotonic()
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(lambda i: one_stream(client, model, prompt, gen_tokens, f"{time.time_ns()}-{i}"),
                                range(streams)))
    wall = time.monotonic() - start
    good = [s for s in results if s.done and s.usage and s.first is not None]
    if not good:
        raise RuntimeError(f"no stream of {streams} finished: {results[0].error or 'no usage reported'}")
    n = len(good)
    gen = [s.usage["completion_tokens"] for s in good]
    tg = [(g - 1) / (s.end - s.first) for g, s in zip(gen, good) if g > 1 and s.end > s.first]
    return Row(streams=streams, ok=n, prompt_tokens=good[0].usage["prompt_tokens"], gen_tokens=sum(gen) / n,
               ttft_s=sum(s.first for s in good) / n,
               pp_tps=sum(s.usage["prompt_tokens"] / s.first for s in good) / n,
               tg_tps=sum(tg) / len(tg) if tg else 0.0, total_tps=sum(gen) / wall, wall_s=wall)


def bench_table(rows):
    return table(["streams", "ok", "prompt", "gen", "ttft s", "pp tok/s", "tg tok/s per stream", "tg tok/s total",
                  "wall s"],
                 [[r.streams, r.ok, r.prompt_tokens, f"{r.gen_tokens:.0f}", f"{r.ttft_s:.2f}", f"{r.pp_tps:.1f}",
                   f"{r.tg_tps:.1f}", f"{r.total_tps:.1f}", f"{r.wall_s:.1f}"] for r in rows])


def write_chart(rows, path, title):
    """The PNG, or the reason there is none (matplotlib not installed)."""
    try:
        import matplotlib
    except ImportError:
        return "no chart: matplotlib is not installed (pip install 'pantheon[charts]')"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = [r.streams for r in rows]
    left.plot(x, [r.pp_tps for r in rows], marker="o")
    left.set(title="prompt processing", xlabel="concurrent streams", ylabel="tokens/s per stream")
    right.plot(x, [r.tg_tps for r in rows], marker="o", label="per stream")
    right.plot(x, [r.total_tps for r in rows], marker="s", label="all streams (tokens / wall)")
    right.set(title="generation", xlabel="concurrent streams", ylabel="tokens/s")
    for ax in (left, right):
        ax.set_xticks(x)
        ax.set_ylim(bottom=0)
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"chart: {path}"


def record(model, rows, client):
    """Append the measured rows to the catalog file of the model's family; returns what was done."""
    arch = _arch(client, model)
    families = catalog.load()
    family = next((f for f in families.values() if f.arch == arch), None)
    if family is None:
        return f"not recorded: no catalog family for architecture {arch!r}"
    for r in rows:
        catalog.append_measured(family, {"model": model, "host": platform.node(), "pantheon": __version__,
                                         **{k: round(v, 2) if isinstance(v, float) else v for k, v in asdict(r).items()}})
    return f"recorded {len(rows)} rows in {family.path}"


def _arch(client, model):
    """The served model's architecture, read from its file (GGUF or HF directory) through /admin/models."""
    models = client.get("/admin/models")
    path = next((m.get("path") for m in (models.body or {}).get("models", []) if m.get("name") == model), None) \
        if models.ok else None
    if not path or not os.path.exists(path):
        return None
    try:
        return model_config(path).arch
    except (PantheonError, OSError):
        return None


def run_bench(inv, out, err, streams, prompt_tokens, gen_tokens):
    client = api.Api(inv.url, key=inv.token, timeout=max(inv.http_timeout, 900))
    prompt = prompt_of(client, inv.target, prompt_tokens)
    rows = []
    for n in levels(streams):
        try:
            rows.append(measure(client, inv.target, n, prompt, gen_tokens))
        except RuntimeError as e:
            err.write(f"bench: {n} streams: {e}\n")
            return 4
        out.write(bench_table(rows).splitlines()[-1] + "\n" if len(rows) > 1 else bench_table(rows))
        out.flush()
    chart = inv.chart or f"bench-{inv.target.replace('/', '_')}.png"
    out.write(write_chart(rows, chart, f"{inv.target} at {inv.url}, {prompt_tokens}-token prompt, "
                                       f"{gen_tokens} generated") + "\n")
    if inv.record:
        out.write(record(inv.target, rows, client) + "\n")
    out.write(json.dumps({"bench": inv.target, "url": inv.url, "prompt_tokens": prompt_tokens,
                          "gen_tokens": gen_tokens, "rows": [asdict(r) for r in rows]}) + "\n")
    return 0
