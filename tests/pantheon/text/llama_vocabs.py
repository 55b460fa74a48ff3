"""llama.cpp's own vocabulary test files (models/ggml-vocab-*.gguf with .inp/.out), from the cache
folder tools/fetch-llama-vocab.sh fills; tests skip with a reason when it is absent."""

import functools
import os
import pathlib

import numpy as np
import pytest

import pantheon

VERSION = "0.3.36"  # the llama-cpp-python sdist the files come from
CACHE = pathlib.Path(os.environ.get("PANTHEON_LLAMA_VOCAB",
                                    pathlib.Path.home() / ".cache" / "pantheon" / "llama-vocab"))
# Every ggml-vocab-NAME.gguf llama.cpp 0.3.36 ships; the ones with .inp/.out vectors first.
WITH_VECTORS = ("bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
                "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder")
WITHOUT_VECTORS = ("aquila", "baichuan", "gpt-neox", "nomic-bert-moe")


def llama_vocab_path(name, suffix=""):
    """Path of ggml-vocab-NAME.gguf{suffix} in the cache, or skip saying how to fill it."""
    path = CACHE / f"ggml-vocab-{name}.gguf{suffix}"
    if not path.exists():
        pytest.skip(f"{path} is absent: run tools/fetch-llama-vocab.sh (downloads llama-cpp-python "
                    f"{VERSION}'s sdist with pip) or set PANTHEON_LLAMA_VOCAB")
    return path


@functools.lru_cache(maxsize=None)
def llama_vocab(name):
    return pantheon.open_tokenizer(str(llama_vocab_path(name)))


def llama_cases(name):
    """[(text, ids)] from the .inp/.out pair, split as llama.cpp's test-tokenizer-0 does."""
    inp = llama_vocab_path(name, ".inp").read_bytes().decode("utf-8")
    out = llama_vocab_path(name, ".out").read_text(encoding="utf-8")
    texts = inp.split("\n__ggml_vocab_test__\n")
    lines = out.split("\n")
    assert len(lines) >= len(texts), (name, len(lines), len(texts))
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


def write_vocab_gguf(path, meta):
    """Write a metadata-only GGUF holding `meta` (values as pantheon's reader returns them)."""
    import gguf

    kinds = {str: gguf.GGUFValueType.STRING, bool: gguf.GGUFValueType.BOOL,
             int: gguf.GGUFValueType.UINT32, float: gguf.GGUFValueType.FLOAT32}
    subs = {np.dtype(np.int32): gguf.GGUFValueType.INT32, np.dtype(np.float32): gguf.GGUFValueType.FLOAT32,
            np.dtype(np.uint8): gguf.GGUFValueType.UINT8}
    writer = gguf.GGUFWriter(str(path), meta["general.architecture"])
    for key, value in meta.items():
        if key == "general.architecture":
            continue
        if isinstance(value, np.ndarray):
            writer.add_key_value(key, value.tolist(), gguf.GGUFValueType.ARRAY, subs[value.dtype])
        elif isinstance(value, list):
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING)
        else:
            writer.add_key_value(key, value, kinds[type(value)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
