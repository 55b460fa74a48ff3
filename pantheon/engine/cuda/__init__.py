"""The GPU engine: CUDA kernels (numba @cuda.jit) and a model with the CPU model's contract; imported only in CUDA die workers."""
