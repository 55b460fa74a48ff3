"""Numba CPU kernels that compute directly on raw ggml quantized blocks."""
