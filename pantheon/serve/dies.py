"""Dies, the units a worker runs on (a set of CPU cores, or one CUDA device): discovery, naming, placement.

CUDA devices are found through NVML, never through CUDA: the supervisor that calls this must not
create a CUDA context before it forks. pynvml is imported and initialised only inside the calls.
"""

import os
import re
import warnings
from dataclasses import dataclass
from typing import Optional

from pantheon.serve import environment
from pantheon.errors import UsageError

_GPU_UUID = re.compile(r"GPU-[0-9A-Za-z-]+")


@dataclass(frozen=True)
class Die:
    """`name` is 'cpu<index>' or 'cuda<index>'; a CUDA index is the ordinal under CUDA_VISIBLE_DEVICES."""

    name: str
    kind: str                            # 'cpu' | 'cuda'
    index: int
    cores: tuple = ()                    # cpu: the core ids the worker pins itself to
    uuid: Optional[str] = None           # cuda: NVML UUID ('GPU-...'), stable across renumbering
    device_name: Optional[str] = None    # cuda: e.g. 'NVIDIA H200'
    memory_total: Optional[int] = None   # cuda: bytes


@dataclass(frozen=True)
class DieMemory:
    used: int    # bytes
    total: int   # bytes


def die_label(name):
    """How a user writes the die in --dies: 'cuda3' -> '3', 'cpu1' -> 'cpu1'."""
    return name[len("cuda"):] if name.startswith("cuda") else name


def die_sort_key(name):
    kind = "cpu" if name.startswith("cpu") else "cuda"
    return kind, int(name[len(kind):])


# ---- CPU dies


def split_cores(cores, n):
    """Sorted `cores` cut into `n` contiguous groups whose sizes differ by at most one (larger first)."""
    cores = sorted(cores)
    if not 1 <= n <= len(cores):
        raise UsageError(f"--cpu-dies {n}: more dies than the {len(cores)} cores this process may use "
                         f"({_ranges(cores)})")
    size, extra = divmod(len(cores), n)
    bounds = [k * size + min(k, extra) for k in range(n + 1)]
    return tuple(tuple(cores[bounds[k]:bounds[k + 1]]) for k in range(n))


def cpu_dies(n, cores):
    return {f"cpu{k}": Die(f"cpu{k}", "cpu", k, cores=group) for k, group in enumerate(split_cores(cores, n))}


def _ranges(cores):
    """[0,1,2,5] -> '0-2,5'."""
    runs = []
    for c in cores:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def pin_to_die(die):
    """Pin the calling process to a CPU die's cores; returns how many threads it should run."""
    assert die.kind == "cpu", die
    os.sched_setaffinity(0, die.cores)
    return len(die.cores)


# ---- CUDA dies through NVML


def import_nvml():
    """The pynvml module, or None when it is not installed. Importing it does not initialise NVML."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # the `pynvml` wheel's "use nvidia-ml-py"
            import pynvml
    except ImportError:
        return None
    return pynvml


def _nvml_errors(nvml):
    return (getattr(nvml, "NVMLError", OSError), OSError)


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_uuids(visible, uuids):
    """UUIDs in CUDA ordinal order under CUDA_VISIBLE_DEVICES=`visible` (None: unset, all of `uuids`).

    `uuids` is in NVML index order. Entries are indices into it or 'GPU-...' UUIDs (a unique prefix
    is enough); like the CUDA runtime, the list ends at the first entry that names no device or
    repeats one, so '' and '-1' hide every device. Integer entries assume CUDA_DEVICE_ORDER=PCI_BUS_ID
    (NVML's order); under the default FASTEST_FIRST they agree unless the GPUs differ in model.
    """
    if visible is None:
        return list(uuids)
    out = []
    for token in visible.split(","):
        uuid = _match_device(token.strip(), uuids)
        if uuid is None or uuid in out:
            break
        out.append(uuid)
    return out


def _match_device(token, uuids):
    if token.isascii() and token.isdigit():
        index = int(token)
        return uuids[index] if index < len(uuids) else None
    if _GPU_UUID.fullmatch(token):
        hits = [u for u in uuids if u.startswith(token)]
        return hits[0] if len(hits) == 1 else None
    return None


def cuda_dies(nvml, visible):
    """Die per visible CUDA device, from an initialised NVML; `visible` is raw CUDA_VISIBLE_DEVICES."""
    count = nvml.nvmlDeviceGetCount()
    uuids = [_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
    return {f"cuda{k}": _cuda_die(nvml, k, uuid) for k, uuid in enumerate(visible_uuids(visible, uuids))}


def _cuda_die(nvml, ordinal, uuid):
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    return Die(f"cuda{ordinal}", "cuda", ordinal, uuid=uuid, device_name=_text(nvml.nvmlDeviceGetName(handle)),
               memory_total=int(nvml.nvmlDeviceGetMemoryInfo(handle).total))


def _with_nvml(nvml, query, fallback):
    """query(nvml) between nvmlInit and nvmlShutdown (both reference-counted by NVML); fallback on failure."""
    nvml = import_nvml() if nvml is None else nvml
    if nvml is None:
        return fallback
    try:
        nvml.nvmlInit()
    except _nvml_errors(nvml):
        return fallback
    try:
        return query(nvml)
    except _nvml_errors(nvml):
        return fallback
    finally:
        nvml.nvmlShutdown()


# ---- discovery and placement


def discover_dies(cpu_dies_n, nvml=None, environ=None, cores=None):
    """name -> Die: `cpu_dies_n` CPU dies over `cores` (default: this process's affinity), then one die per
    visible CUDA device. `nvml` is the pynvml module or a stand-in (default: pynvml if installed);
    without NVML, or when it fails, there are no CUDA dies."""
    environ = os.environ if environ is None else environ
    cores = os.sched_getaffinity(0) if cores is None else cores
    dies = cpu_dies(cpu_dies_n, cores)
    visible = environment.cuda_visible_devices(environ)
    dies.update(_with_nvml(nvml, lambda n: cuda_dies(n, visible), {}))
    return dies


def resolve_placement(config, dies):
    """model index -> tuple of Die, in --dies order; UsageError for a die that is not in `dies`."""
    return {i: tuple(_find(spec, name, dies) for name in spec.dies) for i, spec in enumerate(config.models)}


def _find(spec, name, dies):
    if name in dies:
        return dies[name]
    available = ", ".join(sorted(dies, key=die_sort_key))
    hint = ""
    if name.startswith("cuda") and not any(d.kind == "cuda" for d in dies.values()):
        hint = " (no CUDA device is visible: no NVML, no driver, or CUDA_VISIBLE_DEVICES hides them)"
    raise UsageError(f"--dies {die_label(name)}: no such die (model {spec.name!r}); available: {available}{hint}")


def die_memory(dies, nvml=None):
    """name -> DieMemory(used, total) in bytes for CUDA dies from NVML; None for CPU dies (host RAM is
    pantheon's memory layer's business) and for a CUDA die NVML cannot read. `dies`: name -> Die."""
    out = {name: None for name in dies}
    cuda = [d for d in dies.values() if d.kind == "cuda"]
    if cuda:
        out.update(_with_nvml(nvml, lambda n: {d.name: _read_memory(n, d) for d in cuda}, {}))
    return out


def _read_memory(nvml, die):
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByUUID(die.uuid))
    except _nvml_errors(nvml):
        return None
    return DieMemory(used=int(info.used), total=int(info.total))
