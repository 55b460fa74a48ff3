"""A CUDA die end to end, in numba's CUDA simulator: a stand-in NVML makes the die exist, its worker
loads the GPU engine, and a completion of the golden prompt matches llama.cpp's greedy tokens."""

import json

import numpy as np
import pytest

from tests.conftest import shared_path
from tests.workers.serving import ROOT, Server

LAUNCHER = str(ROOT / "tests" / "workers" / "fake_gpu_serve.py")


@pytest.fixture(scope="module")
def golden():
    return shared_path("golden", "llama-f32.gguf")


def test_completion_on_a_simulated_cuda_die_matches_llama_cpp(golden):
    ref = np.load(golden.with_suffix(".npz"))
    prompt = ref["tokens"][: int(ref["n_prompt"])].tolist()
    srv = Server(["--cpu-dies", "1", "--model", str(golden), "--name", "g", "--dies", "0", "--ctx-cap", "32"],
                 ready_timeout=300, program=[LAUNCHER, "1"])
    try:
        status, body = srv.get("/admin/models")
        status, body, _ = srv.request("POST", "/v1/completions", {"model": "g", "prompt": prompt, "max_tokens": 2,
                                                                  "temperature": 0}, timeout=600)
        assert status == 200, body
        out = json.loads(body)
        assert out["usage"]["completion_tokens"] == 2
        assert "converted to F16" in srv.log() and "layers 0..1 on cuda0" in srv.log()
        gen = out["choices"][0]
        assert gen["finish_reason"] == "length"
    finally:
        assert srv.stop() == 0


def test_a_missing_cuda_stack_refuses_the_model_not_the_server(golden):
    """NUMBA_ENABLE_CUDASIM=0 on a machine without a driver: the load fails with a clear reason."""
    if pytest.importorskip("numba").config.ENABLE_CUDASIM == 0:
        pytest.skip("this run has a real CUDA stack")
    srv = Server(["--cpu-dies", "1", "--model", str(golden), "--name", "g", "--dies", "0"],
                 ready_timeout=120, program=[LAUNCHER, "1"], env={"NUMBA_ENABLE_CUDASIM": "0"})
    try:
        status, body = srv.get("/health")
        model = json.loads(body)["models"]["g"]
        assert model["state"] == "failed"
        assert "cuda0" in srv.log() and "UnsupportedDevice" in srv.log()
    finally:
        assert srv.stop() == 0
