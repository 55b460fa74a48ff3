"""A reranker's classification head (llama.cpp's rank pooling): one pooled hidden state to its scores."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from pantheon.engine.kernels.matmul import dequantize_rows
from pantheon.engine.weights import Weight
from pantheon.errors import ShapeMismatch

# llama.cpp reads a qwen3 reranker at its last token (its converter turns the "yes" and "no" rows of the
# output head into cls.output, and the scores are a softmax over those two); any other at its first
LAST_TOKEN_ARCHS = frozenset(("qwen3",))
SOFTMAX_ARCHS = frozenset(("qwen3",))


@dataclass(frozen=True, eq=False)
class Classifier:
    """cls (dense + tanh) then cls.output, each optional, then a softmax where llama.cpp applies one.
    `row` names the pooling that picks the hidden state the head reads: "last" or "cls" (the first)."""

    row: str
    dense: Optional[np.ndarray]  # float32 [hidden, dim]: cls.weight
    dense_bias: Optional[np.ndarray]  # float32 [hidden]: cls.bias
    out: Optional[np.ndarray]  # float32 [n_cls_out, hidden]: cls.output.weight
    out_bias: Optional[np.ndarray]  # float32 [n_cls_out]: cls.output.bias
    softmax: bool

    @property
    def n_out(self):
        """How many scores one sequence gets (a rerank score is the first)."""
        return len(self.out if self.out is not None else self.dense)

    def scores(self, pooled):
        """float32 [n_out]: the head applied to one pooled hidden state [dim]."""
        x = np.asarray(pooled, np.float32)  # [dim]
        if self.dense is not None:
            x = np.tanh(_affine(self.dense, self.dense_bias, x))  # [hidden]
        if self.out is not None:
            x = _affine(self.out, self.out_bias, x)  # [n_cls_out]
        if self.softmax:
            e = np.exp(x - x.max())  # [n_cls_out]
            x = e / e.sum()  # [n_cls_out]
        return x.astype(np.float32)  # [n_out]


def _affine(w, b, x):
    y = w @ x  # [rows]
    return y if b is None else y + b  # [rows]


def load_classifier(tensors, config):
    """The head of a reranker's file (`tensors`: name -> TensorInfo), None when it has neither cls.weight
    nor cls.output.weight; ShapeMismatch when its shapes do not chain from the hidden size."""
    dense, dense_bias = _matrix(tensors, "cls.weight", config.dim), None
    width = config.dim if dense is None else len(dense)
    if dense is not None:
        dense_bias = _vector(tensors, "cls.bias", width)
    out = _matrix(tensors, "cls.output.weight", width)
    if dense is None and out is None:
        return None
    out_bias = _vector(tensors, "cls.output.bias", len(out)) if out is not None else None
    row = "last" if config.arch in LAST_TOKEN_ARCHS else "cls"
    return Classifier(row, dense, dense_bias, out, out_bias, config.arch in SOFTMAX_ARCHS)


def _matrix(tensors, name, cols):
    t = tensors.get(name)
    if t is None:
        return None
    if len(t.shape) != 2 or t.shape[1] != cols or not 1 <= t.shape[0] <= 1 << 17:
        raise ShapeMismatch(f"tensor {name!r} has shape {tuple(t.shape)}; the classification head needs "
                            f"(rows, {cols})")
    return _rows(name, t, t.shape[0], cols)  # [rows, cols]


def _vector(tensors, name, n):
    t = tensors.get(name)
    if t is None:
        return None
    if tuple(t.shape) != (n,):
        raise ShapeMismatch(f"tensor {name!r} has shape {tuple(t.shape)}, the classification head needs ({n},)")
    return _rows(name, t, 1, n)[0]  # [n]


def _rows(name, t, rows, cols):
    w = Weight(name, int(t.qtype), rows, cols, np.asarray(t.raw).reshape(rows, -1))
    return dequantize_rows(w, np.arange(rows))  # [rows, cols]
