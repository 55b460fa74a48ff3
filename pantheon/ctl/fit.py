"""`pantheon-ctl fit`: pantheon.serve.fit's verdict for one model against this machine's (or given) free memory."""

from pantheon.ctl import output as fmt
from pantheon.errors import GGUFError, UsageError

REFUSED = "REFUSED"   # pantheon.serve.fit's verdict for a file it cannot judge


def fit_report(path, dies, ctx, slots, available=None, vram=None, config=None):
    """The verdict as a JSON-ready dict.

    `available`: host RAM bytes to fit in (default: pantheon.serve.memory.available_ram(), whose total also
    lets the verdict warn about pressure). `vram`: free bytes assumed on every CUDA die (default:
    measured through NVML; a die it cannot read makes the verdict REFUSED). A file that cannot be
    opened is a UsageError; one pantheon cannot serve (unknown architecture, ...) is REFUSED.
    """
    from pantheon.serve import fit

    host, total, source = _host_memory(available)
    report = {"model": path, "dies": list(dies), "ctx": ctx, "slots": slots, "available": host,
              "available_source": source, "vram_available": None, "vram_source": None}
    try:
        estimate = fit.estimate(path, dies=tuple(dies), ctx=ctx, slots=slots, shared_files=(), config=config)
    except OSError as e:
        raise UsageError(f"fit {path!r}: cannot read: {e.strerror or e}") from None
    except GGUFError as e:
        return {**report, "verdict": REFUSED, "reason": f"{path}: {type(e).__name__}: {e}", "numbers": {},
                "estimate": None}
    free, vram_source = _vram_free(list(estimate.vram), vram)
    verdict = fit.verdict(estimate, host, total, free)
    return {**report, "ctx": estimate.ctx, "vram_available": free, "vram_source": vram_source,
            "verdict": fmt.jsonable(verdict.kind), "reason": verdict.reason, "numbers": dict(verdict.numbers),
            "estimate": estimate}


def _host_memory(available):
    """(available bytes, total bytes or None, where the number comes from)."""
    if available is not None:
        return available, None, "--available"
    from pantheon.serve.memory import available_ram

    mem = available_ram()
    return mem.available, mem.total, mem.source


def _vram_free(cuda_dies, vram):
    if not cuda_dies:
        return None, None
    if vram is not None:
        return {d: vram for d in cuda_dies}, "--vram"
    return measured_vram(cuda_dies), "nvml"


def measured_vram(cuda_dies):
    """die -> free bytes, from NVML, for the dies it can read (CUDA_VISIBLE_DEVICES numbering)."""
    from pantheon.serve.dies import die_memory, discover_dies

    found = {name: die for name, die in discover_dies(1).items() if name in cuda_dies}
    return {name: mem.total - mem.used for name, mem in die_memory(found).items() if mem is not None}


def fit_text(r):
    """'VERDICT: reason', what was assumed, then the numbers (all bytes)."""
    assumed = f"RAM available {fmt.human_bytes(r['available'])} ({r['available_source']})"
    if r["vram_available"] is not None:
        free = ", ".join(f"{d} {fmt.human_bytes(b)}" for d, b in r["vram_available"].items()) or "unknown"
        assumed += f"; VRAM free {free} ({r['vram_source']})"
    head = (f"{r['verdict']}: {r['reason']}\n  model {r['model']} on {','.join(r['dies'])}, ctx {r['ctx']}, "
            f"{r['slots']} slots; {assumed}\n")
    return head + fmt.numbers_lines(r["numbers"])
