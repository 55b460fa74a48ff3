"""HF model directories give the same logits as the same weights converted to GGUF the way llama.cpp does."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

import pantheon
from pantheon.engine.model import Model
from pantheon.engine.ops import Rope
from tests.pantheon.hf.tinyhf import ARCHS, make_hf, write_gguf

PROMPT = [5, 17, 33, 2, 9, 100, 7, 8, 250, 3, 64, 11]


def _logits_pair(tmp_path, model_type, dtype="F32", shards=1, quantize=False):
    hf, cfg, weights = make_hf(tmp_path / model_type, model_type, dtype=dtype, shards=shards)
    gguf = write_gguf(tmp_path / f"{model_type}.gguf", cfg, weights, dtype=dtype)
    a = pantheon.open_model(str(hf), threads=1, quantize=quantize).logits(PROMPT)  # [S, V]
    b = pantheon.open_model(str(gguf), threads=1, quantize=quantize).logits(PROMPT)  # [S, V]
    return a, b


def _close(a, b):
    # llama-family rows are rotated in a different order on each side: sums in another order only. These
    # random tiny models amplify that rounding: on the mistral one both sides' attention outputs match
    # float64 to ~1e-7 relative, yet their logits differ by up to 1.1e-5 of the largest (the 32-bit
    # noise of the head dims' summation order, which changes with the attention kernel's lane layout).
    scale = float(np.abs(b).max())
    np.testing.assert_allclose(a, b, rtol=0, atol=5e-5 * scale)


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_same_logits_as_gguf(tmp_path, model_type):
    a, b = _logits_pair(tmp_path, model_type)
    assert a.shape == b.shape == (len(PROMPT), json.loads((tmp_path / model_type / "config.json").read_text())["vocab_size"])
    _close(a, b)


@pytest.mark.parametrize("model_type,dtype,shards", [("llama", "F16", 3), ("qwen3_moe", "BF16", 2),
                                                      ("phi3", "BF16", 1), ("mixtral", "F16", 2)])
def test_half_precision_and_shards(tmp_path, model_type, dtype, shards):
    a, b = _logits_pair(tmp_path, model_type, dtype, shards)
    if shards > 1:
        assert (tmp_path / model_type / "model.safetensors.index.json").is_file()
    _close(a, b)


@pytest.mark.parametrize("model_type", ["llama", "qwen3_moe"])
def test_quantize_at_load(tmp_path, model_type):
    a, b = _logits_pair(tmp_path, model_type, "F16", quantize=True)
    _close(a, b)


def test_rope_order_matters(tmp_path):
    """The control: HF llama rows rotated as interleaved pairs (no un-permute) give other logits."""
    hf, cfg, weights = make_hf(tmp_path / "llama", "llama")
    gguf = write_gguf(tmp_path / "llama.gguf", cfg, weights)
    right = pantheon.open_model(str(gguf), threads=1).logits(PROMPT)  # [S, V]
    m = pantheon.open_model(str(hf), threads=1)
    wrong_cfg = dataclasses.replace(m.config, neox_rope=False)
    wrong = Model(m.gguf, wrong_cfg, m.weights, 1).logits(PROMPT)  # [S, V]
    assert m.config.neox_rope and isinstance(m.rope, Rope)
    assert np.abs(wrong - right).max() > 1e-2 * np.abs(right).max()


def test_weights_are_zero_copy_views_of_the_file(tmp_path):
    hf, _, _ = make_hf(tmp_path / "qwen3", "qwen3", dtype="BF16")
    m = pantheon.open_model(str(hf), threads=1)
    w = m.weights.blocks[0].wq
    assert w.qtype == 30 and not w.raw.flags.writeable and not w.raw.flags.owndata  # BF16, a view
    assert m.weights.output is m.weights.token_embd  # tie_word_embeddings


def test_safetensors_file_with_config_elsewhere(tmp_path):
    hf, cfg, weights = make_hf(tmp_path / "src", "mistral")
    elsewhere = tmp_path / "meta"
    elsewhere.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.move(str(hf / name), str(elsewhere / name))
    m = pantheon.open_model(str(hf / "model.safetensors"), threads=1, config=str(elsewhere / "config.json"))
    b = pantheon.open_model(str(write_gguf(tmp_path / "m.gguf", cfg, weights)), threads=1)
    _close(m.logits(PROMPT), b.logits(PROMPT))
    assert m.tokenizer.bos_id == 1 and m.chat_metadata["tokenizer.chat_template"].startswith("{% for")


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_transformers_agrees(tmp_path, model_type):
    torch = pytest.importorskip("torch", reason="torch not installed: pip install '.[convert]'")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (optional)")
    hf, _, _ = make_hf(tmp_path / model_type, model_type)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(hf), dtype=torch.float32)
    with torch.no_grad():
        want = ref(torch.tensor([PROMPT])).logits[0].numpy()  # [S, V]
    got = pantheon.open_model(str(hf), threads=1).logits(PROMPT)  # [S, V]
    _close(got, want)
