"""Reranker GGUFs for tests: a golden model with a classification head made of rows of its own output
matrix, as llama.cpp's converter makes Qwen3-Reranker's cls.output from the "yes" and "no" rows."""

import numpy as np
from gguf import GGUFReader, GGUFValueType

from tests.ggufcraft import rewrite

RANK = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK


def output_matrix(path):
    """float32 [n_vocab, dim]: the file's output matrix (token_embd when tied), dequantized by gguf-py."""
    from gguf.quants import dequantize
    tensors = {t.name: t for t in GGUFReader(str(path)).tensors}
    t = tensors.get("output.weight") or tensors["token_embd.weight"]
    return dequantize(t.data, t.tensor_type).astype(np.float32)  # [n_vocab, dim]


def make_reranker(src, dst, rows, template=None, tensors=None, scale=1.0):
    """`src` as a reranker at `dst`: pooling type rank, cls.output.weight the output rows `rows` times
    `scale`, the rerank template `template` (with {query} and {document}) when given, more head `tensors`."""
    arch = GGUFReader(str(src)).fields["general.architecture"].contents()
    keys = {f"{arch}.pooling_type": (RANK, GGUFValueType.UINT32)}
    if template is not None:
        keys["tokenizer.chat_template.rerank"] = (template, GGUFValueType.STRING)
    head = {"cls.output.weight": output_matrix(src)[list(rows)] * np.float32(scale)}  # [len(rows), dim]
    return rewrite(src, dst, set_keys=keys, tensor_arrays={**head, **(tensors or {})})
