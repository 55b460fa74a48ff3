"""The K-quant kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) behind the registry's gemv/dequant contract."""

from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import kquants_q2q3 as q23
from pantheon.engine.kernels import kquants_q4q5 as q45
from pantheon.engine.kernels import kquants_q6 as q6
from pantheon.engine.kernels.contract import QuantKernels
from pantheon.engine.kernels.fp16 import fp16_table


def gemv_q2_k(raw, x, out):
    q23.q2_k_gemv(raw, x, out, fp16_table(), q23.LANES)


def gemv_q3_k(raw, x, out):
    q23.q3_k_gemv(raw, x, out, fp16_table(), q23.LANES)


def gemv_q4_k(raw, x, out):
    q45.q4_k_gemv(raw, x, out, fp16_table(), q45.LANES)


def gemv_q5_k(raw, x, out):
    q45.q5_k_gemv(raw, x, out, fp16_table(), q45.LANES)


def gemv_q6_k(raw, x, out):
    q6.q6_k_gemv(raw, x, out, fp16_table(), q6.LANES)


def dequant_q2_k(raw, out):
    q23.q2_k_dequant(raw, out, fp16_table())


def dequant_q3_k(raw, out):
    q23.q3_k_dequant(raw, out, fp16_table())


def dequant_q4_k(raw, out):
    q45.q4_k_dequant(raw, out, fp16_table())


def dequant_q5_k(raw, out):
    q45.q5_k_dequant(raw, out, fp16_table())


def dequant_q6_k(raw, out):
    q6.q6_k_dequant(raw, out, fp16_table())


KERNELS = {
    T.Q2_K: QuantKernels(gemv=gemv_q2_k, dequant=dequant_q2_k),
    T.Q3_K: QuantKernels(gemv=gemv_q3_k, dequant=dequant_q3_k),
    T.Q4_K: QuantKernels(gemv=gemv_q4_k, dequant=dequant_q4_k),
    T.Q5_K: QuantKernels(gemv=gemv_q5_k, dequant=dequant_q5_k),
    T.Q6_K: QuantKernels(gemv=gemv_q6_k, dequant=dequant_q6_k),
}
