"""HF directories made from ../shared/golden give llama.cpp's logits, at the golden README's bounds.

The golden GGUFs are written back as HF checkpoints (q/k rows half-split again for llama/mixtral),
so this checks the HF loader's rope order, names and configs against llama.cpp itself."""

import json

import numpy as np
import pytest

import pantheon
from tests.conftest import shared_path
from tests.pantheon.engine.test_model_golden import tolerance
from tests.pantheon.hf.from_gguf import gguf_to_hf

NAMES = ["llama-f32", "llama-f16", "llama-bf16", "llama-q8_0", "qwen2-q8_0", "qwen3-q8_0", "qwen3moe-q8_0",
         "phi3-q8_0", "mixtral-q8_0"]


@pytest.mark.parametrize("name", NAMES)
def test_hf_logits_match_llama_cpp(tmp_path, name):
    path = shared_path("golden", f"{name}.gguf")
    ref = np.load(path.with_suffix(".npz"))
    spec = json.loads(path.with_suffix(".json").read_text())["spec"]
    model = pantheon.open_model(str(gguf_to_hf(path, tmp_path / name)), threads=2)
    ours = model.logits(ref["tokens"].tolist())  # [T, V]
    want = ref["logits"].astype(np.float32)  # [T, V]
    err = float(((ours - want) ** 2).sum() / (want ** 2).sum())
    assert err <= tolerance(name, spec), f"{name}: normalized error {err:.3g}"
    clear = ref["margins"] >= 3.0
    assert (ours.argmax(-1)[clear] == want.argmax(-1)[clear]).all(), f"{name}: argmax differs"
