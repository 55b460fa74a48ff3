"""Open a model for a CUDA die worker: the die's own device, or every device of its layer-split group."""

from pantheon.engine.cuda.backend import open_backend
from pantheon.engine.cuda.model import GpuModel
from pantheon.engine.cuda.sizing import kv_slots
from pantheon.engine.model_weights import bind_weights
from pantheon.source import open_files


def group_ordinals(die_name, ordinal, split):
    """CUDA ordinals of the split group `die_name` leads ('cuda0+cuda1,...' text), else just `ordinal`."""
    for group in filter(None, split.split(",")):
        names = group.split("+")
        if names[0] == die_name:
            return [int(n[len("cuda"):]) for n in names]
    return [ordinal]


def open_for_die(path, hf_config, die_name, ordinal, split, n_ctx_of, batch, sessions):
    """A GpuModel on the die's devices with its KV pool allocated; `n_ctx_of(n_ctx_train)` gives the context.
    `path` is what the CPU engine opens (GGUF, or safetensors with `hf_config`).

    Layers are shared out in proportion to each device's free memory before the upload (VRAM headroom)."""
    backends = [open_backend(o) for o in group_ordinals(die_name, ordinal, split)]
    free = [b.memory() for b in backends]
    shares = None if any(f is None for f in free) else [f[0] for f in free]
    gguf, config = open_files(path, hf_config)
    model = GpuModel.upload(gguf, config, bind_weights(gguf.tensors, config), backends, shares)
    n_ctx = n_ctx_of(config.n_ctx_train)
    model.allocate(n_ctx, kv_slots(batch, sessions))
    return model, n_ctx


def load_report(model):
    """Lines for the worker's log: placement, device bytes, and each tensor converted to F16."""
    lines = [f"layers {a}..{z - 1} on cuda{s.backend.ordinal}" for (a, z), s in zip(model.layer_ranges, model.stages)]
    lines += [f"cuda{o}: {n / (1 << 20):.1f} MiB of weights, KV pool and scratch" for o, n in model.device_bytes().items()]
    return lines + model.load_log
