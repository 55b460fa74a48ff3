"""The ggml types the GPU keeps as they are (ggml's type codes), and sizes shared with the fit estimate (no CUDA)."""

F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 1, 2, 8, 12, 13, 14, 30
DEVICE_TYPES = frozenset((F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K))
UNIT = 32  # values per unit of work in every weight kernel
# fp16 bytes of dequantized weight per tile of the prefill path (bounds the scratch for vocab-sized matrices)
TILE_BYTES = 128 << 20
# types whose decode products may take int8 activations (qunits.py); F16/BF16 keep the float kernels
INT8_TYPES = frozenset((Q4_0, Q8_0, Q4_K, Q5_K, Q6_K))
