"""Compile every kernel of pantheon.engine.cuda to PTX for sm_90 with numba's real CUDA compiler (no GPU
needed, but NVVM and NVRTC must be installed). Exit 0: all compiled; 3: no CUDA compiler here."""

import sys
import types as pytypes

from numba import cuda
from numba import types as t
from numba.cuda import dispatcher

from pantheon.engine.cuda import compat, layers, matvec, matvec8

U16_3, F32_1, F32_2 = t.Array(t.uint16, 3, "C"), t.Array(t.float32, 1, "C"), t.Array(t.float32, 2, "C")
F16_2, F16_5 = t.Array(t.float16, 2, "C"), t.Array(t.float16, 5, "C")
I32_1, I32_2, F64_1 = t.Array(t.int32, 1, "C"), t.Array(t.int32, 2, "C"), t.Array(t.float64, 1, "C")
F32_3, I32_3 = t.Array(t.float32, 3, "C"), t.Array(t.int32, 3, "C")
I, F = t.int64, t.float32
SIGNATURES = {
    matvec.unit_major: (F32_2, F32_3),
    matvec.qmv: (U16_3, I, F32_3, F32_2, I), matvec.qmv_sel: (U16_3, I, I32_1, I, F32_3, F32_2, I),
    matvec8.quantize_units: (F32_2, I32_3, F32_3), matvec8.qmv8: (U16_3, I, I32_3, F32_3, F32_2, I),
    matvec8.qmv8_sel: (U16_3, I, I32_1, I, I32_3, F32_3, F32_2, I),
    matvec.dequant_tile: (U16_3, I, I, F16_2), matvec.embed: (U16_3, I, I32_1, F32_2),
    layers.rms_norm: (F32_2, I, I, F32_1, F, I, F32_2), layers.rope: (F32_2, I, I, I, I, t.boolean, I32_1, F64_1),
    layers.add_bias: (F32_2, F32_1), layers.add: (F32_2, F32_2), layers.silu_mul: (F32_2, F32_2),
    layers.kv_write: (F32_2, I, F16_5, F16_5, I, I32_1, I32_1),
    layers.attention: (F32_2, I, F16_5, F16_5, I, I32_1, I32_1, F, I, F32_2, F32_2),
    layers.attention_merge: (F32_2, I, I, F32_2),
    layers.route_topk: (F32_2, I32_2, F32_2), layers.moe_combine: (F32_2, F32_2, F32_2),
}


def main():
    compat.numpy_aliases()
    # device functions compile for "the current device": name sm_90 instead of asking a driver
    dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=(9, 0))
    for kernel, sig in SIGNATURES.items():
        try:
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        except Exception as e:  # NVVM or NVRTC absent: nothing to prove here
            if any(w in f"{type(e).__name__} {e}" for w in ("nvrtc", "NVRTC", "NVVM", "nvvm", "libnvvm")):
                print(f"no CUDA compiler: {type(e).__name__}: {e}")
                return 3
            raise
        print(kernel.py_func.__name__, "ok", len(ptx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
