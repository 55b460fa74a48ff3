"""Model-level hostile files: a required key or tensor missing, shapes that disagree with metadata."""

import numpy as np
import pytest
from gguf import GGUFValueType

import pantheon
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
