"""`pantheon-ctl fit`: pantheon.serve.fit's verdict for one model against this machine's (or given) free memory."""

import os

from pantheon.ctl import output as fmt
from pantheon.errors import UsageError
from pantheon.serve import fit
from pantheon.serve.settings import batch_slots_of, model_spec


def fit_report(path, dies, ctx, slots, available=None, vram=None, config=None):
    """The verdict as a JSON-ready dict: pantheon.serve.fit.admission, the check pantheon-serve runs before
    it loads a model, for `path` served as `--model PATH --dies DIES --ctx-cap CTX` with `--batch-slots
    SLOTS` and every other per-model flag at its default.

    `available`: host RAM bytes to fit in (default: pantheon.serve.memory.available_ram(), whose total also
    lets the verdict warn about pressure). `vram`: free bytes assumed on every CUDA die (default:
    measured through NVML; a die it cannot read makes the verdict REFUSED). A file that cannot be
    opened is a UsageError; one pantheon cannot serve (unknown architecture, ...) is REFUSED.
    """
    _readable(path)
    spec = model_spec({"--model": path, "--name": "fit", "--dies": tuple(dies), "--ctx-cap": ctx,
                       **({"--config": config} if config else {})})
    mem = fit.host_memory(available)
    free, vram_source = vram_free([d for d in spec.dies if d.startswith("cuda")], vram)
    verdict = fit.admission(spec, batch_slots_of(spec, slots), False, mem, free)
    est = verdict.estimate
    return {"model": path, "dies": list(dies), "ctx": est.ctx if est else ctx, "slots": slots,
            "available": mem.available, "available_source": mem.source,
            "vram_available": free if est else None, "vram_source": vram_source if est else None,
            "verdict": fmt.jsonable(verdict.kind), "reason": verdict.reason, "numbers": dict(verdict.numbers),
            "estimate": est}


def _readable(path):
    try:
        os.stat(path)  # a GGUF file or an HF model directory
    except OSError as e:
        raise UsageError(f"fit {path!r}: cannot read: {e.strerror or e}") from None


def vram_free(cuda_dies, vram):
    """(die -> free bytes, where from) of the CUDA dies: `vram` on each when given, else NVML's reading."""
    if not cuda_dies:
        return None, None
    if vram is not None:
        return {d: vram for d in cuda_dies}, "--vram"
    return fit.free_vram(cuda_dies), "nvml"


def fit_text(r):
    """'VERDICT: reason', what was assumed, then the numbers (all bytes)."""
    assumed = f"RAM available {fmt.human_bytes(r['available'])} ({r['available_source']})"
    if r["vram_available"] is not None:
        free = ", ".join(f"{d} {fmt.human_bytes(b)}" for d, b in r["vram_available"].items()) or "unknown"
        assumed += f"; VRAM free {free} ({r['vram_source']})"
    head = (f"{r['verdict']}: {r['reason']}\n  model {r['model']} on {','.join(r['dies'])}, ctx {r['ctx']}, "
            f"{r['slots']} slots; {assumed}\n")
    return head + fmt.numbers_lines(r["numbers"])
