"""One memory estimate for every load and for `pantheon-ctl fit`: weights, KV, compute, headroom, verdict."""

import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional

from pantheon.engine.cuda.sizing import gpu_vram
from pantheon.engine.sizes import KV_ELEMENT_BYTES, PREFILL_CHUNK, TILE_BYTES
from pantheon.errors import GGUFError, MissingTensor, UsageError
from pantheon.gguf.ggml import FLOAT_TYPES, Q8_0_BLOCK, Q8_0_BLOCK_BYTES, float_size
from pantheon.serve.dies import die_memory, discover_dies
from pantheon.serve.limits import DEFAULT_BATCH_SLOTS, DEFAULT_CTX_CAP
from pantheon.serve.memory import MemInfo, MiB, PressureLevel, Thresholds, available_ram, level_for
from pantheon.source import open_files

# Float32 activation arrays alive at once, per row and per (dim + q width + n_ff): the FFN phase holds
# x, h, gate, up, silu(gate) and their product; attention holds x, h, q, k, v, a contiguous q copy.
ACT_COPIES = 4
# One worker process before any model: interpreter, numpy, numba, OpenBLAS, JIT-compiled kernels
# (anonymous RSS measured at 74 MiB after a first forward; shared libraries are page cache).
RUNTIME_BYTES = 128 * MiB
VOCAB_BYTES_PER_TOKEN = 256    # the parsed vocabulary and tokenizer maps (~120 B/token measured)
HEADROOM_FRACTION = 0.10
HEADROOM_BYTES = 256 * MiB

FITS, FITS_TIGHT, DOES_NOT_FIT, REFUSED = "FITS", "FITS-TIGHT", "DOES-NOT-FIT", "REFUSED"
_SEVERITY = {FITS: 0, FITS_TIGHT: 1, DOES_NOT_FIT: 2, REFUSED: 3}


@dataclass(frozen=True)
class Estimate:
    """Bytes one load adds to host RAM, and to each CUDA die's memory (`vram`: die -> bytes, no headroom)."""

    path: str
    arch: str
    name: str
    dies: tuple
    ctx: int                 # tokens per sequence after clamping to the model's training context
    slots: int
    sessions: int
    kv_per_token: int        # bytes of one position over every layer, keys and values
    file_weights: int        # tensor bytes in the file
    weights: int             # host RAM: mapped file (once, 0 if shared) + Q8_0 copies under quantize
    kv_slots: int            # caches of the sequences being decoded, every CPU die
    kv_sessions: int         # caches the session store keeps between turns, every CPU die
    compute: int
    runtime: int
    headroom: int
    vram: Mapping = field(default_factory=lambda: MappingProxyType({}))

    @property
    def kv(self):
        return self.kv_slots + self.kv_sessions

    @property
    def need(self):
        """What the load takes without headroom."""
        return self.weights + self.kv + self.compute + self.runtime

    @property
    def total(self):
        return self.need + self.headroom

    def parts(self) -> dict:
        return {"weights": self.weights, "kv": self.kv, "kv_sessions": self.kv_sessions,
                "compute": self.compute, "runtime": self.runtime, "headroom": self.headroom,
                "total": self.total}


@dataclass(frozen=True)
class Verdict:
    """kind: FITS | FITS-TIGHT | DOES-NOT-FIT | REFUSED; numbers: the parts in bytes, for a table."""

    kind: str
    reason: str
    numbers: Mapping
    estimate: Optional[Estimate] = None   # None when the file could not be estimated

    def table(self) -> str:
        rows = [f"{self.kind}: {self.reason}"]
        rows += [f"  {name:<20} {format_bytes(value):>12}" for name, value in self.numbers.items()]
        return "\n".join(rows)


def format_bytes(n):
    return f"{n / (1 << 30):.2f} GiB" if abs(n) >= 1 << 30 else f"{n / MiB:.1f} MiB"


# ---- the estimate


def estimate(path, dies=("cpu0",), ctx=DEFAULT_CTX_CAP, slots=DEFAULT_BATCH_SLOTS, shared_files=(), sessions=0,
             quantize=False, chunk=PREFILL_CHUNK, config=None) -> Estimate:
    """Memory of serving `path` on `dies`, from GGUF metadata (or an HF model's config.json, `config`
    when not beside its weights) and tensor shapes only (no weight page is read). Typed GGUFError subclasses (UnsupportedArchitecture, MissingKey, MissingTensor, ...)
    say why a file is refused; UsageError for a bad argument.

    Every die runs its own engine: `slots` sequences decoded together plus up to `sessions` caches
    kept between turns (the engine's max_batch and max_sessions), each of up to `ctx` tokens.
    `shared_files`: paths already mapped by a loaded model; their weights add nothing on CPU dies.
    `quantize`: float matrices become per-process Q8_0 copies (open_model(quantize=True))."""
    _check_args(dies, ctx, slots, sessions, chunk)
    gguf, cfg = open_files(path, config)
    return estimate_from(cfg, gguf.tensors, path, dies, ctx, slots, shared_files, sessions, quantize, chunk)


def estimate_from(cfg, tensors, path, dies=("cpu0",), ctx=DEFAULT_CTX_CAP, slots=DEFAULT_BATCH_SLOTS,
                  shared_files=(), sessions=0, quantize=False, chunk=PREFILL_CHUNK, check=True) -> Estimate:
    """estimate() from a config and `tensors` (name -> record with qtype, shape and n_bytes): a GGUF
    header read over HTTP before its weights (pantheon.gguf.file.read_layout), or, with check=False,
    a spec built from a catalog family whose tensor names are not known."""
    names = _check_args(dies, ctx, slots, sessions, chunk)
    if check:
        _check_tensors(tensors, cfg)
    by_name, tensors = tensors, list(tensors.values())
    n_ctx = min(ctx, cfg.n_ctx_train)
    per_token = 2 * cfg.n_layer * cfg.n_head_kv * cfg.head_dim * KV_ELEMENT_BYTES
    die = _per_die(tensors, cfg, n_ctx, per_token, slots, sessions, chunk)
    mapped, private = _weight_split(tensors, quantize)
    cpu = sum(n.startswith("cpu") for n in names)
    shared = _real(path) in {_real(p) for p in shared_files}
    host = dict(weights=(0 if shared or not cpu else mapped) + private * cpu, kv_slots=die.kv_slots * cpu,
                kv_sessions=die.kv_sessions * cpu, compute=die.compute * cpu, runtime=die.runtime * len(names))
    file_weights = sum(t.n_bytes for t in tensors)
    vram = _vram(by_name, cfg, n_ctx, slots, sessions, [n for n in names if n.startswith("cuda")])
    return Estimate(path=os.fspath(path), arch=cfg.arch, name=cfg.name, dies=names, ctx=n_ctx, slots=slots,
                    sessions=sessions, kv_per_token=per_token, file_weights=file_weights,
                    headroom=_headroom(sum(host.values())), vram=MappingProxyType(vram), **host)


def _vram(tensors, cfg, n_ctx, slots, sessions, cuda):
    """Bytes on each CUDA die: several CUDA dies of one --model split its layers, so each holds a share."""
    if not cuda:
        return {}
    per_die = gpu_vram(tensors, cfg, n_ctx, slots, sessions, len(cuda))
    return {n: per_die for n in cuda}


@dataclass(frozen=True)
class _PerDie:
    """What every die's engine holds on its own."""

    kv_slots: int
    kv_sessions: int
    compute: int
    runtime: int


def _per_die(tensors, cfg, n_ctx, per_token, slots, sessions, chunk):
    matrices = [t.shape for t in tensors if len(t.shape) >= 2]
    return _PerDie(kv_slots=slots * n_ctx * per_token, kv_sessions=sessions * n_ctx * per_token,
                   compute=_compute(cfg, matrices, chunk, slots, n_ctx, per_token),
                   runtime=RUNTIME_BYTES + VOCAB_BYTES_PER_TOKEN * cfg.n_vocab)


def _check_args(dies, ctx, slots, sessions, chunk):
    """The die names, after UsageError for anything out of range."""
    for name, value, least in (("ctx", ctx, 1), ("slots", slots, 1), ("chunk", chunk, 1), ("sessions", sessions, 0)):
        if not isinstance(value, int) or value < least:
            raise UsageError(f"{name} must be an integer of at least {least}, got {value!r}")
    return _die_names(dies)


def _die_names(dies):
    names = tuple(getattr(d, "name", d) for d in dies)
    bad = [n for n in names if not (isinstance(n, str) and n.startswith(("cpu", "cuda")))]
    if not names or bad:
        raise UsageError(f"dies must name at least one 'cpuN' or 'cudaN' die, got {list(names)!r}")
    return names


def _real(path):
    return os.path.realpath(os.fspath(path))


def _check_tensors(tensors, cfg):
    """MissingTensor for the first tensor the architecture needs that is absent (shapes are checked
    when the model is bound, pantheon.engine.model_weights)."""
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        names += [p + "attn_norm.weight", p + "ffn_norm.weight", p + "attn_output.weight"]
        if p + "attn_qkv.weight" not in tensors:
            names += [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        if cfg.n_expert:
            names += [p + "ffn_gate_inp.weight", *_expert_names(tensors, p, cfg.n_expert)]
        else:
            names += [p + "ffn_up.weight", p + "ffn_down.weight"]
    missing = next((n for n in names if n not in tensors), None)
    if missing is not None:
        raise MissingTensor(f"tensor {missing!r} is required but absent")


def _expert_names(tensors, p, n_expert):
    """Stacked ffn_*_exps tensors, or one tensor per expert (HF checkpoints, old Mixtral GGUFs)."""
    if p + "ffn_gate_exps.weight" in tensors or p + "ffn_gate.0.weight" not in tensors:
        return [f"{p}ffn_{n}_exps.weight" for n in ("gate", "up", "down")]
    return [f"{p}ffn_{n}.{e}.weight" for e in range(n_expert) for n in ("gate", "up", "down")]


def _weight_split(tensors, quantize):
    """(bytes served from the shared file map, bytes of per-process Q8_0 copies).

    quantize=True converts every float matrix (experts one by one) whose rows split into 32-blocks;
    vectors stay in the map."""
    total = sum(t.n_bytes for t in tensors)
    if not quantize:
        return total, 0
    converted = [t for t in tensors
                 if len(t.shape) >= 2 and t.qtype in FLOAT_TYPES and t.shape[-1] % Q8_0_BLOCK == 0]
    private = sum(t.n_bytes // float_size(t.qtype) // Q8_0_BLOCK * Q8_0_BLOCK_BYTES for t in converted)
    return total - sum(t.n_bytes for t in converted), private


def _compute(cfg, matrices, chunk, slots, n_ctx, per_token):
    """Scratch of one engine step: activations of `chunk` prompt rows plus one row per slot,
    the logits of each slot, the largest dequantized tile, and one cache's growth copy."""
    rows = chunk + slots
    width = cfg.dim + cfg.n_head * cfg.head_dim + max(cfg.n_ff, cfg.n_ff_expert)
    activations = ACT_COPIES * rows * width * 4
    logits = slots * cfg.n_vocab * 4
    tile = max(min(TILE_BYTES, shape[-2] * shape[-1] * 4) for shape in matrices)  # one matrix or expert
    # KVCache doubles its capacity: going from ctx/2 to ctx holds both arrays while it copies.
    growth = (n_ctx // 2) * per_token
    return activations + logits + tile + growth


def _headroom(need):
    return int(need * HEADROOM_FRACTION) + HEADROOM_BYTES


# ---- the verdict


def verdict(est, available_bytes, total_bytes=None, vram_available=None, thresholds=Thresholds()) -> Verdict:
    """Judge `est` against `available_bytes` of host RAM (and `vram_available`: die -> free bytes).

    FITS: fits with its headroom to spare. FITS-TIGHT: fits only by eating into the headroom, or
    (when `total_bytes` is given) would leave RAM at pressure TIGHT or worse. DOES-NOT-FIT otherwise;
    REFUSED when a CUDA die's free memory is unknown."""
    numbers = dict(est.parts(), available=int(available_bytes))
    judged = [_judge("RAM", est.need, est.headroom, available_bytes, total_bytes, thresholds)]
    for die, need in est.vram.items():
        free = (vram_available or {}).get(die)
        numbers[f"vram:{die}"] = need
        if free is None:
            judged.append((REFUSED, f"{die}: free memory unknown, cannot admit {format_bytes(need)}"))
            continue
        numbers[f"vram_available:{die}"] = int(free)
        judged.append(_judge(die, need, _headroom(need), free, None, thresholds))
    kind = max((k for k, _ in judged), key=_SEVERITY.__getitem__)
    reason = "; ".join(r for k, r in judged if k == kind)
    return Verdict(kind, reason, MappingProxyType(numbers), est)


def _judge(what, need, headroom, available, total, thresholds):
    full, left = need + headroom, available - need
    after = level_for(max(left, 0), total, thresholds) if total else None
    note = f", pressure {after.name} after the load" if after is not None else ""
    if full <= available:
        if after is not None and after >= PressureLevel.TIGHT:
            return FITS_TIGHT, (f"{what}: fits, but leaves {format_bytes(left)} of {format_bytes(total)} "
                                f"free{note}")
        return FITS, f"{what}: needs {format_bytes(full)} with headroom, {format_bytes(available)} available"
    if left >= 0:
        return FITS_TIGHT, (f"{what}: fits only by using {format_bytes(full - available)} of the "
                            f"{format_bytes(headroom)} headroom ({format_bytes(available)} available{note})")
    return DOES_NOT_FIT, (f"{what}: needs {format_bytes(need)} ({format_bytes(full)} with headroom), "
                          f"{format_bytes(available)} available: short by {format_bytes(-left)}")


def fit(path, mem=None, vram_available=None, thresholds=Thresholds(), **estimate_args) -> Verdict:
    """estimate() then verdict() against `mem` (a memory.MemInfo; default: available_ram() now).
    A file that cannot be read or served is a REFUSED verdict naming why; UsageError propagates."""
    mem = available_ram() if mem is None else mem
    try:
        est = estimate(path, **estimate_args)
    except (GGUFError, OSError) as e:
        return _refused(path, e)
    return verdict(est, mem.available, mem.total, vram_available, thresholds)


def _refused(path, error):
    return Verdict(REFUSED, f"{os.fspath(path)}: {type(error).__name__}: {error}", MappingProxyType({}))


def estimate_load(spec, batch_slots, quantize=False, shared_files=()):
    """estimate() of serving a --model slot (a settings.ModelSpec) as its die workers will run it."""
    return estimate(spec.path, dies=spec.dies, ctx=spec.ctx_cap, slots=batch_slots, sessions=spec.max_sessions,
                    quantize=quantize, shared_files=shared_files, config=spec.config or None)


def admission(spec, batch_slots, quantize, mem, vram_available, shared_files=()) -> Verdict:
    """The one check every load passes: pantheon-serve's start-up models and admin loads, and
    pantheon-ctl fit. `mem`: memory.MemInfo; `vram_available`: die -> free bytes."""
    try:
        est = estimate_load(spec, batch_slots, quantize, shared_files)
    except (GGUFError, OSError) as e:
        return _refused(spec.path, e)
    return verdict(est, mem.available, mem.total, vram_available)


def host_memory(available=None):
    """MemInfo to judge against: measured now (available_ram), or `available` bytes as given (no total)."""
    return available_ram() if available is None else MemInfo(None, available, "--available")


def free_vram(names, dies=None, nvml=None):
    """die name -> free bytes for each CUDA die in `names` that NVML can read. `dies`: name -> Die
    (default: discovered now, CUDA_VISIBLE_DEVICES numbering)."""
    dies = discover_dies(1, nvml) if dies is None else dies
    found = {n: d for n, d in dies.items() if n in names and d.kind == "cuda"}
    return {n: mem.total - mem.used for n, mem in die_memory(found, nvml).items() if mem is not None}
