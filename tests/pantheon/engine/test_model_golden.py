"""Logits of every golden model against llama.cpp's, at every position (../shared/golden)."""

import json

import numpy as np
import pytest

import pantheon
from tests.conftest import SHARED, shared_path
from tests.rerankers import output_matrix

GOLDEN = sorted(p.stem for p in (SHARED / "golden").glob("*.gguf")) or ["(absent)"]


def tolerance(name, spec):
    """The normalized squared error bound the golden README states for this model."""
    if "experts=" in spec:
        return 5e-3
    return {"llama-f32": 1e-5, "llama-f16": 1e-5, "llama-bf16": 1e-4}.get(name, 1e-3)


@pytest.mark.parametrize("name", GOLDEN)
def test_logits_match_llama_cpp(name):
    path = shared_path("golden", f"{name}.gguf")
    ref = np.load(path.with_suffix(".npz"))
    spec = json.loads(path.with_suffix(".json").read_text())["spec"]
    model = pantheon.open_model(str(path), threads=2)
    ours = model.logits(ref["tokens"].tolist())
    want = ref["logits"].astype(np.float32)
    assert ours.shape == want.shape and ours.dtype == np.float32
    err = float(((ours - want) ** 2).sum() / (want ** 2).sum())
    assert err <= tolerance(name, spec), f"{name}: normalized error {err:.3g}"
    clear = ref["margins"] >= 3.0
    assert (ours.argmax(-1)[clear] == want.argmax(-1)[clear]).all(), f"{name}: argmax differs"


def test_greedy_continuation_matches_llama_cpp():
    # Chosen because every margin on its greedy path is above 1.0 (no near-ties to flip).
    path = shared_path("golden", "qwen2-q8_0.gguf")
    ref = np.load(path.with_suffix(".npz"))
    model = pantheon.open_model(str(path), threads=1)
    cache = model.new_cache(64)
    tokens = ref["tokens"][: int(ref["n_prompt"])].tolist()
    logits = model.forward([(cache, tokens)])[0]
    out = []
    for _ in range(8):
        out.append(int(logits[-1].argmax()))
        logits = model.forward([(cache, [out[-1]])])[0]
    assert out == ref["greedy"][:8].tolist()


@pytest.mark.parametrize("name", ["qwen2-q8_0", "llama-q4_k_m", "llama-tied-q8_0", "qwen3moe-q8_0"])
def test_hidden_states_are_what_llama_cpps_logits_are_made_of(name):
    """forward(hidden=) hands back the final normed hidden states (an embedding's input): through the
    file's own output matrix they give llama.cpp's logits within the golden bound."""
    path = shared_path("golden", f"{name}.gguf")
    ref = np.load(path.with_suffix(".npz"))
    spec = json.loads(path.with_suffix(".json").read_text())["spec"]
    model = pantheon.open_model(str(path), threads=2)
    tokens = ref["tokens"].tolist()
    h = model.forward([(model.new_cache(64), tokens)], hidden=[0])[0]  # [T, dim]
    assert h.shape == (len(tokens), model.config.dim) and h.dtype == np.float32
    ours = h @ output_matrix(path).T  # [T, n_vocab]
    want = ref["logits"].astype(np.float32)
    err = float(((ours - want) ** 2).sum() / (want ** 2).sum())
    assert err <= tolerance(name, spec), f"{name}: normalized error {err:.3g}"


def test_hidden_and_logit_segments_share_one_forward():
    path = shared_path("golden", "qwen2-q8_0.gguf")
    tokens = np.load(path.with_suffix(".npz"))["tokens"].tolist()
    model = pantheon.open_model(str(path), threads=2)
    alone_h = model.forward([(model.new_cache(64), tokens[:9])], hidden=[0])[0]  # [9, dim]
    alone_l = model.forward([(model.new_cache(64), tokens[3:14])])[0]  # [1, n_vocab]
    both = model.forward([(model.new_cache(64), tokens[3:14]), (model.new_cache(64), tokens[:9])], hidden=[1])
    np.testing.assert_allclose(both[0], alone_l, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(both[1], alone_h, rtol=1e-4, atol=1e-4)
