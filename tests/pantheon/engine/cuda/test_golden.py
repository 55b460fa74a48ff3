"""GPU-engine logits of the golden models against llama.cpp's, within the golden README's bounds.

In the simulator a forward pass over a golden model costs tens of seconds, so each model is
teacher-forced over its first PREFILL + 1 positions: one prefill of PREFILL tokens (more than
MAX_BATCH: dequantized fp16 tiles and the GEMM) and one decode step (the raw-block matrix-vector
kernels) over the KV cache the prefill wrote. FAST models run in CI; the rest with --run-slow.
"""

import json

import numpy as np
import pytest

from pantheon.engine.cuda.matvec import MAX_BATCH
from pantheon.engine.cuda.model import open_gpu_model
from tests.conftest import SHARED, shared_path
from tests.pantheon.engine.test_model_golden import tolerance

GOLDEN = sorted(p.stem for p in (SHARED / "golden").glob("*.gguf")) or ["(absent)"]
FAST = ("llama-q4_0", "qwen3moe-q8_0")
PREFILL = MAX_BATCH + 1


def gpu_logits(path, tokens):
    """float32 [len(tokens), n_vocab]: a prefill of all but the last token, then one decode step."""
    model = open_gpu_model(str(path), [0])
    model.allocate(len(tokens), 2)
    cache = model.new_cache()
    head = model.forward([(cache, tokens[:-1])], all_logits=True)[0]  # [n-1, vocab]
    tail = model.forward([(cache, tokens[-1:])])[0]  # [1, vocab]
    return np.concatenate([head, tail])  # [n, vocab]


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in GOLDEN])
def test_gpu_logits_match_llama_cpp(name):
    path = shared_path("golden", f"{name}.gguf")
    ref = np.load(path.with_suffix(".npz"))
    spec = json.loads(path.with_suffix(".json").read_text())["spec"]
    n = PREFILL + 1
    ours = gpu_logits(path, ref["tokens"][:n].tolist())
    want = ref["logits"][:n].astype(np.float32)
    err = float(((ours - want) ** 2).sum() / (want ** 2).sum())
    assert err <= tolerance(name, spec), f"{name}: normalized error {err:.3g}"
    clear = ref["margins"][:n] >= 3.0
    assert (ours.argmax(-1)[clear] == want.argmax(-1)[clear]).all(), f"{name}: argmax differs"
