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
ATTN_THREADS = 32  # threads per (token, head) in attention: the shared combine buffer is sized by it


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
def _attend_keys(q, kcache, vcache, layer, s, i, h, kh, p, t, nt, scale, acc):
    """Online softmax over keys t, t+nt, ... <= p of one (token, head): returns (max, sum); acc [hd] holds Σ e·v."""
    hd = kcache.shape[4]
    top, total = np.float32(-math.inf), np.float32(0.0)
    for d in range(hd):
        acc[d] = 0.0
    for j in range(t, p + 1, nt):
        sc = np.float32(0.0)
        for d in range(hd):
            sc += q[i, h * hd + d] * np.float32(kcache[layer, s, kh, j, d])
        sc *= scale
        if sc > top:
            f = math.exp(top - sc)
            total *= f
            for d in range(hd):
                acc[d] *= f
            top = sc
        e = math.exp(sc - top)
        total += e
        for d in range(hd):
            acc[d] += e * np.float32(vcache[layer, s, kh, j, d])
    return top, total


@cuda.jit
def attention(q, heads, kcache, vcache, layer, slot, pos, scale, out):
    """Causal GQA: out[i, h*hd:(h+1)*hd] for the query q[i, h*hd:(h+1)*hd] (q float32 [n, >= H*hd]) of token i
    at pos[i] in sequence slot[i].

    Keys and values: fp16 [layers, slots, KV, n_ctx, hd]. One thread block per (token, head); its
    threads split the keys, then combine their partial softmax sums through shared memory."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    n_kv, hd = kcache.shape[2], kcache.shape[4]
    acc = cuda.local.array(MAX_HEAD_DIM, np.float32)  # [hd] this thread's Σ e·v
    tops = cuda.shared.array(ATTN_THREADS, np.float32)  # [threads]
    sums = cuda.shared.array(ATTN_THREADS, np.float32)  # [threads]
    part = cuda.shared.array((ATTN_THREADS, MAX_HEAD_DIM), np.float32)  # [threads, hd]
    for b in range(cuda.blockIdx.x, q.shape[0] * heads, cuda.gridDim.x):
        i, h = b // heads, b % heads
        top, total = _attend_keys(q, kcache, vcache, layer, slot[i], i, h, h // (heads // n_kv), pos[i], t, nt,
                                  scale, acc)
        tops[t] = top
        cuda.syncthreads()
        best = tops[0]
        for k in range(1, nt):
            best = max(best, tops[k])
        f = math.exp(top - best) if total > np.float32(0.0) else np.float32(0.0)
        sums[t] = total * f
        for d in range(hd):
            part[t, d] = acc[d] * f
        cuda.syncthreads()
        norm = np.float32(0.0)
        for k in range(nt):
            norm += sums[k]
        for d in range(t, hd, nt):
            v = np.float32(0.0)
            for k in range(nt):
                v += part[k, d]
            out[i, h * hd + d] = v / norm
        cuda.syncthreads()


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
