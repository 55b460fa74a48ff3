#!/usr/bin/env bash
# ONE command on the device machine (an H200 with CuPy, numba-cuda, torch, numpy): install the tree
# from the carried wheels, print the benchmark's JSON line, then run the GPU test suite on the real GPU.
# Prepare here first: `benchmarks/gpu_wheels.sh`; then run with carry=[".whl"]:
#   bash benchmarks/gpu_check.sh
# Budget: benchmark <= 270 s, then tests <= 150 s (the device lease is 15 minutes, start included).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0 PANTHEON_SHARED="$PWD/.whl"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: installing the carried wheels failed"; exit 1; }
export PYTHONPATH="/tmp/site:$PWD"
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
python3 -c 'import pantheon, cupy, numba, numba.cuda as c; print("pantheon from", pantheon.__file__, "cupy", cupy.__version__,
    "numba", numba.__version__, "numba-cuda", getattr(c, "__version__", "?"))'
# the benchmark first: its figures are the bars; progress lines on stderr keep what a time limit cuts short
timeout 270 python3 -m benchmarks.gpu_bench --torch --profile 2>"$OUT/gpu_bench.err" | tee "$OUT/gpu_check.json"
tail -4 "$OUT/gpu_bench.err" | cut -c1-3000
# the kernels' own PTX build for sm_90 is proven where no GPU is (tests/pantheon/engine/cuda/test_ptx.py)
timeout 150 python3 -m pytest -q -p no:cacheprovider --run-slow --timeout 100 --deselect \
    tests/pantheon/engine/cuda/test_ptx.py::test_every_kernel_compiles_for_sm_90 \
    tests/pantheon/engine/cuda tests/workers/test_cuda_die.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
