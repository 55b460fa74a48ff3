"""Element-wise, normalisation, rope, KV-cache and mixture-of-experts kernels of the transformer.

Every kernel loops over its work items by grid stride (threads) or block stride (thread blocks), so
any launch geometry computes the same result: a real GPU launches one item per thread or block, the
simulator a single thread. Reductions inside a block go through shared memory, barriers reached by
all threads of the block.
"""

import math

import numpy as np
from numba import cuda

MAX_THREADS = 256
MAX_HEAD_DIM = 256
MAX_EXPERTS = 512
ATTN_THREADS = 128  # threads per (token, head) in attention: one per dimension of a 128-wide head
TILE_KEYS = 32  # keys per shared-memory tile of attention (32 x 257 floats: 33 KB)
KEY_ROW = MAX_HEAD_DIM + 1  # a tile's row stride: value d of key j in bank (j + d) % 32


@cuda.jit(device=True, inline=True)
def _block_sum(buf, t, nt):
    """Sum buf[:nt] into buf[0] by halving (nt a power of two); every thread of the block calls it."""
    s = nt // 2
    while s > 0:
        cuda.syncthreads()
        if t < s:
            buf[t] += buf[t + s]
        s //= 2
    cuda.syncthreads()


@cuda.jit
def rms_norm(x, c0, width, weight, eps, group, out):
    """Columns [c0, c0 + width) of x float32 [n, C], in groups of `group`: out = x * weight / rms(group); out may be x."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    buf = cuda.shared.array(MAX_THREADS, np.float32)  # [threads]
    groups = width // group
    for b in range(cuda.blockIdx.x, x.shape[0] * groups, cuda.gridDim.x):
        i, g0 = b // groups, c0 + (b % groups) * group
        ss = np.float32(0.0)
        for j in range(t, group, nt):
            ss += x[i, g0 + j] * x[i, g0 + j]
        buf[t] = ss
        _block_sum(buf, t, nt)
        inv = np.float32(1.0) / math.sqrt(buf[0] / np.float32(group) + eps)
        for j in range(t, group, nt):
            out[i, g0 + j] = x[i, g0 + j] * inv * weight[j]
        cuda.syncthreads()  # buf[0] is read by all before the next row overwrites it


@cuda.jit
def rope(x, c0, heads, head_dim, n_rot, neox, pos, inv_freq):
    """Rotate heads at columns [c0, c0 + heads*head_dim) of x float32 [n, C] in place at positions pos int32 [n]:
    NeoX halves or interleaved pairs."""
    half = n_rot // 2
    for t in range(cuda.grid(1), x.shape[0] * heads * half, cuda.gridsize(1)):
        i, rest = t // (heads * half), t % (heads * half)
        h, p = rest // half, rest % half
        theta = np.float64(pos[i]) * inv_freq[p]
        c, s = np.float32(math.cos(theta)), np.float32(math.sin(theta))
        a = c0 + h * head_dim + (p if neox else 2 * p)
        b = a + (half if neox else 1)
        xa, xb = x[i, a], x[i, b]
        x[i, a] = xa * c - xb * s
        x[i, b] = xa * s + xb * c


@cuda.jit
def add_bias(x, bias):
    """x float32 [n, C] += bias float32 [C]."""
    cols = x.shape[1]
    for t in range(cuda.grid(1), x.shape[0] * cols, cuda.gridsize(1)):
        x[t // cols, t % cols] += bias[t % cols]


@cuda.jit
def add(x, y):
    """x float32 [n, C] += y float32 [n, C] (the residual stream)."""
    cols = x.shape[1]
    for t in range(cuda.grid(1), x.shape[0] * cols, cuda.gridsize(1)):
        x[t // cols, t % cols] += y[t // cols, t % cols]


@cuda.jit
def silu_mul(gu, out):
    """out[i, j] = silu(gu[i, j]) * gu[i, ff + j] for gu float32 [n, 2*ff] (gate, then up), out [n, ff]."""
    ff = out.shape[1]
    for t in range(cuda.grid(1), out.shape[0] * ff, cuda.gridsize(1)):
        i, j = t // ff, t % ff
        g = gu[i, j]
        # exp overflow for very negative g gives inf and a 0 quotient, as the CPU engine's silu
        out[i, j] = g / (np.float32(1.0) + math.exp(-g)) * gu[i, ff + j]


@cuda.jit
def kv_write(qkv, c0, kcache, vcache, layer, slot, pos):
    """Store keys qkv[i, c0:c0+KV*hd] and the values after them, of each token i, at [layer, slot[i], :, pos[i]] as fp16."""
    n_kv, hd = kcache.shape[2], kcache.shape[4]
    width = n_kv * hd
    for t in range(cuda.grid(1), qkv.shape[0] * width, cuda.gridsize(1)):
        i, c = t // width, t % width
        kcache[layer, slot[i], c // hd, pos[i], c % hd] = qkv[i, c0 + c]
        vcache[layer, slot[i], c // hd, pos[i], c % hd] = qkv[i, c0 + width + c]


@cuda.jit(device=True, inline=True)
def _key_tile(kcache, layer, s, kh, j0, m, ks, t, nt):
    """ks[:m, :hd] = keys j0..j0+m-1 as float32; adjacent threads copy adjacent values (coalesced reads)."""
    hd = kcache.shape[4]
    for e in range(t, m * hd, nt):
        ks[e // hd, e % hd] = np.float32(kcache[layer, s, kh, j0 + e // hd, e % hd])


@cuda.jit(device=True, inline=True)
def _tile_weights(qs, ks, ps, m, hd, top, t, nt):
    """ps[:m] = exp(score - best) of the tile's keys (one thread a key); returns best = max(top, scores)."""
    for j in range(t, m, nt):
        sc = np.float32(0.0)
        for d in range(hd):
            sc += qs[d] * ks[j, d]
        ps[j] = sc
    cuda.syncthreads()
    best = top
    for j in range(m):
        best = max(best, ps[j])
    cuda.syncthreads()  # every thread has read the scores before they become weights
    for j in range(t, m, nt):
        ps[j] = math.exp(ps[j] - best)
    cuda.syncthreads()
    return best


@cuda.jit
def attention(q, heads, kcache, vcache, layer, slot, pos, scale, splits, parts, out):
    """Causal GQA: out[i, h*hd:(h+1)*hd] for the query q[i, h*hd:(h+1)*hd] (q float32 [n, >= H*hd]) of token i
    at pos[i] in sequence slot[i]; with splits > 1, split s of each (token, head) takes key tiles s, s+splits,
    ... and leaves (max, sum, Σ weight·v) in parts float32 [n*H*splits, 2 + hd] for attention_merge.

    Keys and values: fp16 [layers, slots, KV, n_ctx, hd]. One thread block per (token, head, split) walks
    its keys a tile at a time with an online softmax: the block copies the tile's keys into shared memory
    (rows padded, so threads reading one value of different keys hit different banks), a thread scores
    one key, and each thread then folds the tile's weighted value rows into its own dimensions, adjacent
    threads reading adjacent values. Every global read is coalesced, where a thread walking its own keys
    reads one line per thread of a warp. Splits give a decode step (one token: H blocks) enough blocks
    to keep the device busy."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    n_kv, hd = kcache.shape[2], kcache.shape[4]
    qs = cuda.shared.array(MAX_HEAD_DIM, np.float32)  # [hd] the scaled query
    ks = cuda.shared.array((TILE_KEYS, KEY_ROW), np.float32)  # [keys, hd] one tile's keys, padded
    ps = cuda.shared.array(TILE_KEYS, np.float32)  # [keys] the tile's weights
    acc = cuda.local.array(MAX_HEAD_DIM, np.float32)  # [hd] Σ weight·v, at this thread's dimensions
    for b in range(cuda.blockIdx.x, q.shape[0] * heads * splits, cuda.gridDim.x):
        i, h, sp = b // (heads * splits), (b // splits) % heads, b % splits
        s, kh, p = slot[i], h // (heads // n_kv), pos[i]
        for d in range(t, hd, nt):
            qs[d] = q[i, h * hd + d] * scale
            acc[d] = 0.0
        top, total = np.float32(-math.inf), np.float32(0.0)
        cuda.syncthreads()
        for j0 in range(sp * TILE_KEYS, p + 1, splits * TILE_KEYS):
            m = min(TILE_KEYS, p + 1 - j0)
            _key_tile(kcache, layer, s, kh, j0, m, ks, t, nt)
            cuda.syncthreads()
            best = _tile_weights(qs, ks, ps, m, hd, top, t, nt)
            f = math.exp(top - best)  # rescales what earlier tiles summed (0 before the first)
            total *= f
            for j in range(m):
                total += ps[j]
            for d in range(t, hd, nt):
                a = acc[d] * f
                for j in range(m):
                    a += ps[j] * np.float32(vcache[layer, s, kh, j0 + j, d])
                acc[d] = a
            top = best
            cuda.syncthreads()  # the next tile rewrites ks and ps
        _attention_out(acc, top, total, b, i, h, hd, t, nt, splits, parts, out)


@cuda.jit(device=True, inline=True)
def _attention_out(acc, top, total, b, i, h, hd, t, nt, splits, parts, out):
    """The (token, head)'s output when it was not split, else this split's partial sums in parts[b]."""
    if splits == 1:
        for d in range(t, hd, nt):
            out[i, h * hd + d] = acc[d] / total
        return
    if t == 0:
        parts[b, 0], parts[b, 1] = top, total
    for d in range(t, hd, nt):
        parts[b, 2 + d] = acc[d]


@cuda.jit
def attention_merge(parts, heads, splits, out):
    """out[i, h*hd + d] from the `splits` partial sums of (token i, head h) that attention left in parts
    float32 [n*H*splits, 2 + hd] (a split that had no keys holds max -inf and sum 0)."""
    hd = parts.shape[1] - 2
    for t in range(cuda.grid(1), out.shape[0] * heads * hd, cuda.gridsize(1)):
        b0, d = (t // hd) * splits, t % hd
        best = parts[b0, 0]
        for k in range(1, splits):
            best = max(best, parts[b0 + k, 0])
        num, den = np.float32(0.0), np.float32(0.0)
        for k in range(splits):
            f = math.exp(parts[b0 + k, 0] - best)
            num += f * parts[b0 + k, 2 + d]
            den += f * parts[b0 + k, 1]
        out[t // (heads * hd), (t // hd) % heads * hd + d] = num / den


@cuda.jit
def route_topk(logits, ids, weights):
    """Softmax over logits float32 [n, E], keep the top k = ids.shape[1] (ties: lower id first), renormalise."""
    n_exp, k = logits.shape[1], ids.shape[1]
    taken = cuda.local.array(MAX_EXPERTS, np.uint8)  # [E]
    for i in range(cuda.grid(1), logits.shape[0], cuda.gridsize(1)):
        top = logits[i, 0]
        for e in range(n_exp):
            top = max(top, logits[i, e])
            taken[e] = 0
        kept = np.float32(0.0)
        for s in range(k):
            best = -1
            for e in range(n_exp):
                if taken[e] == 0 and (best < 0 or logits[i, e] > logits[i, best]):
                    best = e
            taken[best] = 1
            ids[i, s] = best
            weights[i, s] = math.exp(logits[i, best] - top)
            kept += weights[i, s]
        for s in range(k):
            weights[i, s] /= kept


@cuda.jit
def moe_combine(x, y, weights):
    """x float32 [n, dim] += Σ_s weights[i, s] * y[i*k + s] for expert outputs y float32 [n*k, dim]."""
    dim, k = x.shape[1], weights.shape[1]
    for t in range(cuda.grid(1), x.shape[0] * dim, cuda.gridsize(1)):
        i, d = t // dim, t % dim
        acc = np.float32(0.0)
        for s in range(k):
            acc += weights[i, s] * y[i * k + s, d]
        x[i, d] += acc
