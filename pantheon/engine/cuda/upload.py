"""Weights onto a device, once: quantized blocks as they are in the file, other types converted to F16.

Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, F16 and BF16 rows are copied byte for byte from the GGUF mmap; any
other ggml type (F32, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K) is dequantized on the host by the CPU kernels
and uploaded as F16, and the load log names every tensor so converted.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np
from gguf import GGMLQuantizationType

from pantheon.engine.cuda.qtypes import DEVICE_TYPES, F16
from pantheon.engine.kernels.matmul import dequantize_rows

CONVERT_ROWS = 4096  # rows dequantized per host chunk when converting (bounds the float32 scratch)


@dataclass(frozen=True, eq=False)
class DeviceMatrix:
    """raw uint8 [experts, rows, row_bytes] on one device; qtype a ggml type code of DEVICE_TYPES."""

    name: str
    qtype: int
    rows: int
    cols: int
    raw: object

    @property
    def nbytes(self):
        return int(self.raw.nbytes)

    @property
    def words(self):
        """raw as little-endian uint16 [experts, rows, row_bytes / 2]: what the kernels read (a view)."""
        return self.raw.view(np.uint16)


@dataclass(frozen=True, eq=False)
class DeviceBlock:
    """One transformer block's device weights; fused row groups (q|k|v, gate|up) are lists of matrices."""

    attn_norm: object
    ffn_norm: object
    qkv: tuple               # matrices whose rows, concatenated, are q, k, v
    wo: DeviceMatrix
    bqkv: Optional[object]   # float32 [q+2kv] or None
    q_norm: Optional[object]
    k_norm: Optional[object]
    gate_up: tuple = ()      # dense FFN: matrices whose rows, concatenated, are gate then up
    down: Optional[DeviceMatrix] = None
    router: Optional[DeviceMatrix] = None
    gate_exps: Optional[DeviceMatrix] = None
    up_exps: Optional[DeviceMatrix] = None
    down_exps: Optional[DeviceMatrix] = None


def _as_f16_rows(w):
    """F16 bytes [rows, cols*2] of Weight w, dequantized on the host in chunks of rows."""
    if w.qtype == GGMLQuantizationType.F32:
        return np.asarray(w.raw).view(np.float32).astype(np.float16).view(np.uint8)  # [rows, cols*2]
    out = np.empty((w.rows, w.cols), np.float16)  # [rows, cols]
    for r0 in range(0, w.rows, CONVERT_ROWS):
        r1 = min(w.rows, r0 + CONVERT_ROWS)
        out[r0:r1] = dequantize_rows(w, np.arange(r0, r1))
    return out.view(np.uint8)  # [rows, cols*2]


class Uploader:
    """Copies Weights onto `backend`; `log` collects one line per tensor converted to F16."""

    def __init__(self, backend):
        self.backend = backend
        self.log = []

    def _host_rows(self, w):
        if int(w.qtype) in DEVICE_TYPES:
            return int(w.qtype), np.asarray(w.raw)
        self.log.append(f"{w.name}: {GGMLQuantizationType(w.qtype).name} converted to F16 on upload")
        return F16, _as_f16_rows(w)

    def matrix(self, w):
        qtype, rows = self._host_rows(w)
        return DeviceMatrix(w.name, qtype, w.rows, w.cols, self.backend.upload(rows[None]))

    def experts(self, ws):
        """One DeviceMatrix [experts, rows, row_bytes] from per-expert Weights of one tensor."""
        qtypes, host = zip(*(self._host_rows(w) for w in ws))
        name = ws[0].name.split("[")[0]
        return DeviceMatrix(name, qtypes[0], ws[0].rows, ws[0].cols, self.backend.upload(np.stack(host)))

    def vector(self, v):
        return None if v is None else self.backend.upload(np.asarray(v, np.float32))

    def block(self, blk):
        qkv = (blk.wqkv,) if blk.wqkv is not None else (blk.wq, blk.wk, blk.wv)
        bias = None if blk.bq is None else np.concatenate([blk.bq, blk.bk, blk.bv])  # [q + 2kv]
        fields = dict(attn_norm=self.vector(blk.attn_norm), ffn_norm=self.vector(blk.ffn_norm),
                      qkv=tuple(self.matrix(w) for w in qkv), wo=self.matrix(blk.wo), bqkv=self.vector(bias),
                      q_norm=self.vector(blk.q_norm), k_norm=self.vector(blk.k_norm))
        if blk.experts is not None:
            e = blk.experts
            fields.update(router=self.matrix(e.router), gate_exps=self.experts(e.gate),
                          up_exps=self.experts(e.up), down_exps=self.experts(e.down))
        else:
            gate_up = (blk.up,) if blk.gate is None else (blk.gate, blk.up)
            fields.update(gate_up=tuple(self.matrix(w) for w in gate_up), down=self.matrix(blk.down))
        return DeviceBlock(**fields)


def block_matrices(blk):
    """Every DeviceMatrix of a DeviceBlock (for tile sizing and byte counts)."""
    mats = list(blk.qkv) + [blk.wo] + list(blk.gate_up)
    mats += [m for m in (blk.down, blk.router, blk.gate_exps, blk.up_exps, blk.down_exps) if m is not None]
    return mats
