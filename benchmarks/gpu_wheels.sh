#!/usr/bin/env bash
# Run HERE (not on the device): put in .whl/ what the bare H200 lacks, for `run` to carry (see
# benchmarks/gpu_check.sh): the wheels of gguf, falcon, waitress, posix_ipc for CPython 3.12 on
# manylinux x86-64, Pantheon's own wheel built from this tree, and a subset of ../shared/golden
# (the whole folder exceeds what a run may carry). GPU_WHEELS_OFFLINE=1 skips the downloads (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SHARED=${PANTHEON_SHARED:-../shared}
# keep .whl/ out of `git status` when this is a clone (CI runs on an export without .git)
if exclude=$(git rev-parse --git-path info/exclude 2>/dev/null) && [ -d "$(dirname "$exclude")" ]; then
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
fi
WHL=${WHEEL_DIR:-.whl}
rm -rf "$WHL" && mkdir -p "$WHL/golden"
if [ "${GPU_WHEELS_OFFLINE:-0}" != 1 ]; then
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$WHL" gguf==0.19.0 falcon==4.4.0 waitress==3.0.2 posix_ipc==1.3.2
fi
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHL" .
for m in llama-q4_0 llama-q8_0 llama-q4_k_m llama-q5_k_m llama-q6_k llama-f16 llama-bf16 llama-f32 qwen3moe-q8_0; do
    for ext in gguf json npz; do
        if [ -f "$SHARED/golden/$m.$ext" ]; then cp "$SHARED/golden/$m.$ext" "$WHL/golden/"; fi
    done
done
du -sh "$WHL"
