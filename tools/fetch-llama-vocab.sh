#!/usr/bin/env bash
# Fetch the vocabulary test files llama.cpp ships under models/ (ggml-vocab-*.gguf with .inp/.out
# token-id vectors) into a cache folder, for tests/pantheon/text/test_llama_vocabs.py.
#   tools/fetch-llama-vocab.sh [DIR]   (default: $PANTHEON_LLAMA_VOCAB or ~/.cache/pantheon/llama-vocab)
# The files come from the llama-cpp-python sdist (which vendors llama.cpp), downloaded by pip without
# building anything; about 75 MiB. Tests never download: without DIR they skip, saying so.
set -euo pipefail
version=0.3.36
dest=${1:-${PANTHEON_LLAMA_VOCAB:-$HOME/.cache/pantheon/llama-vocab}}
if [ -f "$dest/.complete-$version" ]; then
  echo "llama.cpp vocabularies already in $dest"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --timeout 30 --retries 1 --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
mkdir -p "$dest"
tar -xzf "$tmp"/llama_cpp_python-$version.tar.gz -C "$tmp" --wildcards \
  "llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-*"
cp "$tmp"/llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-* "$dest"/
touch "$dest/.complete-$version"
echo "llama.cpp $version vocabularies in $dest"
