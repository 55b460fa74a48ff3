#!/usr/bin/env bash
# ONE command on the device machine (an H200 with CuPy, numba-cuda, torch, numpy): install the tree
# from the carried wheels, run the GPU test suite on the real GPU, then print the benchmark's JSON line.
# Prepare here first: `benchmarks/gpu_wheels.sh`; then run with carry=[".whl"]:
#   bash benchmarks/gpu_check.sh
# Budget: tests <= 240 s, benchmark <= 270 s (the device lease is 15 minutes, start included).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0 PANTHEON_SHARED="$PWD/.whl"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: installing the carried wheels failed"; exit 1; }
export PYTHONPATH="/tmp/site:$PWD"
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
python3 -c 'import pantheon, cupy, numba.cuda; print("pantheon from", pantheon.__file__, "cupy", cupy.__version__)'
timeout 240 python3 -m pytest -q -p no:cacheprovider --run-slow tests/pantheon/engine/cuda tests/workers/test_cuda_die.py \
    2>&1 | tee "$OUT/gpu_tests.log" | tail -25
timeout 270 python3 -m benchmarks.gpu_bench --torch 2>"$OUT/gpu_bench.err" | tee "$OUT/gpu_check.json"
tail -5 "$OUT/gpu_bench.err"
