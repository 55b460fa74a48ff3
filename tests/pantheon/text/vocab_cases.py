"""llama.cpp's vocabulary test files in ../shared/vocab: open each tokenizer once, read its cases."""

import functools

import pantheon
from tests.conftest import shared_path

VOCABS = ("llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "qwen35")


@functools.lru_cache(maxsize=None)
def vocab(name):
    """The tokenizer of ggml-vocab-NAME.gguf, opened through the public API."""
    return pantheon.open_tokenizer(str(shared_path("vocab", f"ggml-vocab-{name}.gguf")))


def cases(name):
    """[(text, expected ids)] in file order; the .inp split is the one vocab/README.md gives."""
    inp = shared_path("vocab", f"ggml-vocab-{name}.gguf.inp").read_bytes().decode("utf-8")
    out = shared_path("vocab", f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8")
    texts = inp.split("\n__ggml_vocab_test__\n")
    lines = out.split("\n")
    assert len(lines) >= len(texts), (name, len(lines), len(texts))
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]
