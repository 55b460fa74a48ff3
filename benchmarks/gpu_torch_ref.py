"""The torch fp16 reference: the random Q4_0 model's weights dequantized to fp16 by our kernel, run by
torch (cuBLAS matmuls, scaled_dot_product_attention), eager, in the same process and on the same GPU."""

import time

import numpy as np

from benchmarks.gpu_model import make_model
from pantheon.engine.cuda import matvec
from pantheon.engine.cuda.backend import open_backend


def _fp16(b, torch, mat):
    """The fp16 matrix [rows, cols] of a DeviceMatrix, as a torch tensor on the device."""
    out = b.empty((mat.rows, mat.cols), np.float16)  # [rows, cols]
    n = mat.rows * (mat.cols // 32)
    b.launch(matvec.dequant_tile, b.geometry.grid(n, 256), 256)(mat.words, mat.qtype, 0, out)
    b.synchronize()
    return torch.from_dlpack(out)


def _weights(b, torch, model):
    layers = [dict(qkv=torch.cat([_fp16(b, torch, m) for m in blk.qkv]), wo=_fp16(b, torch, blk.wo),
                   gu=torch.cat([_fp16(b, torch, m) for m in blk.gate_up]), down=_fp16(b, torch, blk.down))
              for blk in model.stages[0].blocks]
    return layers, _fp16(b, torch, model.output)


def _rms(torch, x):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)


def _forward(torch, cfg, layers, out_w, x, kc, vc, p0):
    """x fp16 [n, dim] at positions p0..; kc, vc [layers, kv, ctx, hd]; returns logits of the last row."""
    F = torch.nn.functional
    n, hd, qd, kd = x.shape[0], cfg.head_dim, cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    for li, w in enumerate(layers):
        qkv = _rms(torch, x) @ w["qkv"].T  # [n, qd + 2kd]
        q = qkv[:, :qd].view(n, cfg.n_head, hd).transpose(0, 1)  # [H, n, hd]
        kc[li, :, p0:p0 + n] = qkv[:, qd:qd + kd].view(n, cfg.n_head_kv, hd).transpose(0, 1)
        vc[li, :, p0:p0 + n] = qkv[:, qd + kd:].view(n, cfg.n_head_kv, hd).transpose(0, 1)
        att = F.scaled_dot_product_attention(q[None], kc[li, None, :, :p0 + n], vc[li, None, :, :p0 + n],
                                             is_causal=n > 1, enable_gqa=True)  # [1, H, n, hd]
        x = x + att[0].transpose(0, 1).reshape(n, qd) @ w["wo"].T  # [n, dim]
        gu = _rms(torch, x) @ w["gu"].T  # [n, 2ff]
        x = x + (F.silu(gu[:, :cfg.n_ff]) * gu[:, cfg.n_ff:]) @ w["down"].T  # [n, dim]
    return _rms(torch, x[-1:]) @ out_w.T  # [1, vocab]


def torch_figures(shape, prompt, steps):
    import torch

    b = open_backend(0)
    model = make_model(b, "Q4_0", shape)
    layers, out_w = _weights(b, torch, model)
    cfg = model.config
    model.close()
    kc = torch.zeros((cfg.n_layer, cfg.n_head_kv, prompt + steps + 2, cfg.head_dim), dtype=torch.float16,
                     device="cuda")  # [L, kv, ctx, hd]
    vc = torch.zeros_like(kc)
    x = torch.randn((prompt, cfg.dim), dtype=torch.float16, device="cuda") * 0.1  # [prompt, dim]
    with torch.inference_mode():
        _forward(torch, cfg, layers, out_w, x, kc, vc, 0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _forward(torch, cfg, layers, out_w, x, kc, vc, 0)
        torch.cuda.synchronize()
        pre = time.perf_counter() - t0
        t0 = time.perf_counter()
        for s in range(steps):
            _forward(torch, cfg, layers, out_w, x[:1], kc, vc, prompt + s % 2)
        torch.cuda.synchronize()
        one = (time.perf_counter() - t0) / steps
    return {"prefill_tok_s": prompt / pre, "decode_tok_s": 1 / one}
