"""Engine memory facts the load estimator needs, and where the engine keeps files; no numba here, so the
supervisor may import it."""

# Float32 bytes dequantized per prefill tile. Large on purpose: each switch between numba's thread pool
# (dequant) and OpenBLAS's (sgemm) costs milliseconds on 2 shared vCPUs, so one tile per matrix
# (2048x5632 is 46 MB) measured 1.3-1.9x faster than 256..1024-row tiles; the cap bounds the
# scratch for vocabulary-sized matrices.
TILE_BYTES = 64 << 20
KV_ELEMENT_BYTES = 2       # the KV cache is float16 (pantheon.engine.kvcache)
PREFILL_CHUNK = 256        # prompt tokens computed per engine step (EngineConfig.prefill_chunk)
# A step that scores a prompt (prompt logprobs) keeps float32 logits for every row of its chunk: its chunk
# is cut to hold at most this many bytes of them (a 152k vocabulary: 55 rows, not 155 MB for 256).
SCORED_LOGITS_BYTES = 32 << 20
# Where repacked weights (pantheon.engine.repacked) are kept unless told otherwise.
REPACK_DIR = "~/.cache/pantheon/repacked"
