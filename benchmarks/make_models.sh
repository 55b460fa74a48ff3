#!/usr/bin/env bash
# Write the random-weight benchmark models into DIR with ../shared/tools (mkmodel.py, then llama.cpp's
# own quantizer through the binding that ../shared/tools/install-llama-cpp.sh builds):
#   tiny-{f16,q4_0,q8_0,q4_k_m}.gguf      TinyLlama-1.1B shape (dim 2048, 22 layers, 32/4 heads, ffn 5632)
#   qwen3moe-{f16,q4_k_m,q8_0}.gguf       Qwen3-MoE shape, scaled to fit a 2-core VM: dim 1024, 8 layers,
#                                         16/4 heads of 128, 64 experts (8 used) of ffn 512, Qwen2 vocabulary
#   make_models.sh DIR [tiny|moe|all] [LCPP_PYTHON]
set -euo pipefail
dir=${1:?usage: make_models.sh DIR [tiny|moe|all] [LCPP_PYTHON]}
which=${2:-all}
py=${3:-$HOME/.cache/pantheon-lcpp-venv/bin/python}
tools=$(cd "$(dirname "$0")/../../shared/tools" && pwd)
vocab=$tools/../vocab
mkdir -p "$dir"

build() {  # NAME then mkmodel flags: NAME-f16.gguf once, then each quantization in $QUANTS
  local name=$1; shift
  [ -f "$dir/$name-f16.gguf" ] || python3 "$tools/mkmodel.py" "$@" --dtype f16 --out "$dir/$name-f16.gguf"
  for q in $QUANTS; do
    local out="$dir/$name-$(echo "$q" | tr 'A-Z' 'a-z').gguf"
    [ -f "$out" ] || "$py" "$tools/quantize.py" "$dir/$name-f16.gguf" "$out" "$q"
  done
}

if [ "$which" = tiny ] || [ "$which" = all ]; then
  QUANTS="Q4_0 Q8_0 Q4_K_M" build tiny --vocab "$vocab/ggml-vocab-llama-spm.gguf" --arch llama \
    --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632
fi
if [ "$which" = moe ] || [ "$which" = all ]; then
  QUANTS="Q4_K_M Q8_0" build qwen3moe --vocab "$vocab/ggml-vocab-qwen2.gguf" --arch qwen3moe \
    --dim 1024 --layers 8 --heads 16 --kv-heads 4 --head-dim 128 --ffn 3072 --experts 64 \
    --experts-used 8 --expert-ffn 512 --ctx 4096 --rope-base 1000000
fi
ls -l "$dir"
