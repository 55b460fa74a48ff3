"""A reranker's head (llama.cpp's rank pooling) against llama.cpp's logits: golden models given a
cls.output made of two rows of their output matrix score what llama.cpp's logits for those rows say."""

import numpy as np
import pytest
import pantheon
from pantheon.engine.classifier import load_classifier
from pantheon.engine.scheduler import EmbeddingEvent, Engine, EngineConfig, Request
from pantheon.errors import EngineError, ShapeMismatch
from tests.conftest import shared_path
from tests.rerankers import make_reranker, output_matrix


def reference(name):
    path = shared_path("golden", f"{name}.gguf")
    ref = np.load(path.with_suffix(".npz"))
    n = int(ref["n_prompt"])
    return path, ref["tokens"][:n].tolist(), ref["logits"][:n].astype(np.float64)  # logits [n, n_vocab]


def two_rows(logits):
    """The best token and the one whose logit is nearest 4 below it: a softmax over them is not saturated."""
    best = int(logits.argmax())
    other = int(np.argmin(np.abs(logits - (logits[best] - 4.0)) + (np.arange(len(logits)) == best) * 1e9))
    return [best, other]


def rank(model, prompt):
    engine = Engine(model, EngineConfig(n_ctx=64))
    engine.add(Request(1, tuple(prompt), max_tokens=0, embed="rank"))
    events = []
    while engine.has_work:
        events += engine.step()
    return next(e.vector for e in events if isinstance(e, EmbeddingEvent))


def tol(logits):
    return 0.01 * np.abs(logits).max()  # the golden bound (1e-3 normalized squared error) per logit, roughly


def test_a_qwen3_reranker_is_a_softmax_over_its_head_at_the_last_token(tmp_path):
    path, prompt, logits = reference("qwen3-q8_0")
    rows = two_rows(logits[-1])
    want = logits[-1][rows[0]] - logits[-1][rows[1]]  # llama.cpp's log-odds of the first row
    assert abs(logits[0][rows[0]] - logits[0][rows[1]] - want) > 4 * tol(logits[-1])  # the row read matters
    model = pantheon.open_model(str(make_reranker(path, tmp_path / "r.gguf", rows)), threads=2)
    got = rank(model, prompt)
    assert got.dtype == np.float32 and got.shape == (2,)
    assert abs(float(got.sum()) - 1.0) < 1e-6
    assert abs(np.log(got[0] / got[1]) - want) < tol(logits[-1])


def test_any_other_reranker_scores_its_first_token_with_no_softmax(tmp_path):
    path, prompt, logits = reference("llama-q8_0")
    rows = two_rows(logits[0])
    assert np.abs(logits[-1][rows] - logits[0][rows]).max() > 4 * tol(logits[0])  # the row read matters
    model = pantheon.open_model(str(make_reranker(path, tmp_path / "r.gguf", rows)), threads=2)
    np.testing.assert_allclose(rank(model, prompt), logits[0][rows], atol=tol(logits[0]))


def test_a_dense_layer_with_biases_runs_before_the_output(tmp_path):
    """cls.weight, cls.bias, tanh, then cls.output with its bias (BERT-style heads), from the first row."""
    path, prompt, _ = reference("llama-q8_0")
    g = np.random.default_rng(3)
    dim = output_matrix(path).shape[1]
    dense, bias = g.standard_normal((8, dim)).astype(np.float32) / 8, g.standard_normal(8).astype(np.float32)
    out, out_bias = g.standard_normal((3, 8)).astype(np.float32), g.standard_normal(3).astype(np.float32)
    dst = make_reranker(path, tmp_path / "r.gguf", [0], tensors={
        "cls.weight": dense, "cls.bias": bias, "cls.output.weight": out, "cls.output.bias": out_bias})
    model = pantheon.open_model(str(dst), threads=2)
    h = model.forward([(model.new_cache(64), prompt)], hidden=[0])[0][0]  # [dim]: llama.cpp-checked states
    np.testing.assert_allclose(rank(model, prompt), out @ np.tanh(dense @ h + bias) + out_bias, rtol=1e-4, atol=1e-4)


def test_a_head_whose_shapes_do_not_chain_is_refused_at_load(tmp_path):
    path, _, _ = reference("llama-q8_0")
    dst = make_reranker(path, tmp_path / "r.gguf", [0], tensors={"cls.output.weight": np.zeros((2, 7), np.float32)})
    model = pantheon.open_model(str(dst), threads=2)
    with pytest.raises(ShapeMismatch, match="cls.output.weight"):
        Engine(model, EngineConfig(n_ctx=64))


def test_a_model_without_a_head_has_none_and_a_rank_request_is_refused():
    path, prompt, _ = reference("llama-q8_0")
    model = pantheon.open_model(str(path), threads=2)
    assert load_classifier(model.gguf.tensors, model.config) is None
    engine = Engine(model, EngineConfig(n_ctx=64))
    with pytest.raises(EngineError, match="no classification head"):
        engine.add(Request(1, tuple(prompt), max_tokens=0, embed="rank"))
    assert not engine.has_work
