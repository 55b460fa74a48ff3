"""Device bytes the GPU engine allocates for a model, from GGUF shapes alone (no CUDA): the fit estimate's VRAM."""

from pantheon.engine.cuda.kvpool import pool_bytes
from pantheon.engine.cuda.qtypes import DEVICE_TYPES, TILE_BYTES


def device_weight_bytes(tensors):
    """Bytes of every tensor as uploaded: kept types as in the file, other matrices as F16, vectors as float32."""
    total = 0
    for t in tensors.values():
        n = 1
        for s in t.shape:
            n *= int(s)
        if len(t.shape) == 1:
            total += 4 * n
        elif int(t.qtype) in DEVICE_TYPES:
            total += int(t.n_bytes)
        else:
            total += 2 * n
    return total


def kv_slots(batch, sessions):
    """KV pool slots of one engine: the running batch, the kept sessions, and one spare."""
    return batch + sessions + 1


def gpu_vram(tensors, cfg, n_ctx, batch, sessions, n_dies):
    """Bytes on each of `n_dies` devices splitting the model's layers: weights and KV pool in equal shares,
    plus every device's tile scratch and activations (an upper bound: the scratch is at most TILE_BYTES)."""
    weights = device_weight_bytes(tensors)
    pool = pool_bytes(cfg, kv_slots(batch, sessions), n_ctx)
    activations = 4 * max(256, batch) * (cfg.n_vocab + 4 * max(cfg.dim, cfg.n_ff))
    return -(-(weights + pool) // n_dies) + TILE_BYTES + activations

