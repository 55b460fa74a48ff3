"""Model-level hostile files: a required key or tensor missing, shapes that disagree with metadata."""

import numpy as np
import pytest
from gguf import GGUFValueType

import pantheon
from pantheon.engine.model_weights import matrices
from pantheon.errors import MissingKey, MissingTensor, ShapeMismatch, UnsupportedArchitecture
from tests.conftest import shared_path
from tests.ggufcraft import rewrite


@pytest.fixture(scope="module")
def base():
    return shared_path("golden", "llama-f32.gguf")


def test_missing_tensor_is_named(base, tmp_path):
    bad = rewrite(base, tmp_path / "m.gguf", drop_tensors={"blk.1.ffn_down.weight"})
    with pytest.raises(MissingTensor, match="blk.1.ffn_down.weight"):
        pantheon.open_model(str(bad))


def test_missing_key_is_named(base, tmp_path):
    bad = rewrite(base, tmp_path / "m.gguf", drop_keys={"llama.embedding_length"})
    with pytest.raises(MissingKey, match="llama.embedding_length"):
        pantheon.open_model(str(bad))


def test_shape_disagreeing_with_metadata(base, tmp_path):
    bad = rewrite(base, tmp_path / "m.gguf",
                  set_keys={"llama.feed_forward_length": (96, GGUFValueType.UINT32)})
    with pytest.raises(ShapeMismatch, match="ffn_gate"):
        pantheon.open_model(str(bad))


def test_wrong_norm_length(base, tmp_path):
    bad = rewrite(base, tmp_path / "m.gguf", tensor_arrays={"output_norm.weight": np.ones(63, np.float32)})
    with pytest.raises(ShapeMismatch, match="output_norm.weight"):
        pantheon.open_model(str(bad))


def test_unknown_architecture(base, tmp_path):
    bad = rewrite(base, tmp_path / "m.gguf", set_keys={"general.architecture": ("mamba", GGUFValueType.STRING)})
    with pytest.raises(UnsupportedArchitecture, match="mamba"):
        pantheon.open_model(str(bad))


def test_tied_output_when_output_weight_absent(base, tmp_path):
    tied = rewrite(base, tmp_path / "m.gguf", drop_tensors={"output.weight"})
    model = pantheon.open_model(str(tied), threads=1)
    assert model.weights.output is model.weights.token_embd


def test_matrices_are_what_qmatmul_multiplies():
    """Untied token embeddings are only looked up, and MoE routers take the float matmul: neither is
    among the matrices (the ones repacked); every expert is, once."""
    llama = pantheon.open_model(str(shared_path("golden", "llama-q4_0.gguf")), repack=False).weights
    names = [w.name for w in matrices(llama)]
    assert "token_embd.weight" not in names and "output.weight" in names
    assert len(names) == len(set(names)) == 7 * len(llama.blocks) + 1
    moe = pantheon.open_model(str(shared_path("golden", "qwen3moe-q8_0.gguf")), repack=False).weights
    names = [w.name for w in matrices(moe)]
    experts = moe.blocks[0].experts
    assert not any(n.endswith("ffn_gate_inp.weight") for n in names)
    assert f"blk.0.ffn_down_exps.weight[{len(experts.down) - 1}]" in names
    assert len(names) == len(set(names)) == (4 + 3 * len(experts.gate)) * len(moe.blocks) + 1


def test_moe_experts_are_served_repacked_within_the_same_logits(tmp_path):
    path = str(shared_path("golden", "qwen3moe-q8_0.gguf"))
    want = pantheon.open_model(path, repack=False).logits([1, 2, 3, 4])
    model = pantheon.open_model(path, repack_dir=tmp_path)
    if not any(w.packed is not None for w in matrices(model.weights)):
        pytest.skip("host has no AVX512-VNNI: nothing is repacked")
    assert model.weights.blocks[0].experts.gate[0].packed is not None
    np.testing.assert_array_equal(model.logits([1, 2, 3, 4]), want)
