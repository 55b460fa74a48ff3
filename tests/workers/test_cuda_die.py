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


def _serve(golden, env=None, **kw):
    """One server: model `g` on the simulated cuda0, the same file as `c` on cpu0 (the CPU engine).
    A simulated step takes tens of seconds on a busy machine: the hang timeout must not fire first."""
    return Server(["--cpu-dies", "1", "--model", str(golden), "--name", "g", "--dies", "0", "--ctx-cap", "32",
                   "--model", str(golden), "--name", "c", "--dies", "cpu0", "--ctx-cap", "32"],
                  program=[LAUNCHER, "1"], env={"PANTHEON_HANG_TIMEOUT": "900", **(env or {})}, **kw)


def _complete(srv, model, prompt):
    status, body, _ = srv.request("POST", "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 2,
                                                              "temperature": 0}, timeout=600)
    assert status == 200, body
    return json.loads(body)


def test_completion_on_a_simulated_cuda_die_matches_the_cpu_engine(golden):
    ref = np.load(golden.with_suffix(".npz"))
    prompt = ref["tokens"][: int(ref["n_prompt"])].tolist()  # llama.cpp's greedy path is clear here
    srv = _serve(golden, ready_timeout=300)
    try:
        gpu, cpu = _complete(srv, "g", prompt), _complete(srv, "c", prompt)
        assert gpu["usage"]["completion_tokens"] == 2 and gpu["choices"][0]["finish_reason"] == "length"
        assert gpu["choices"][0]["text"] == cpu["choices"][0]["text"]
        assert "converted to F16" in srv.log() and "layers 0..1 on cuda0" in srv.log()
        vectors = [_embed(srv, model, prompt[:6]) for model in ("g", "c")]  # the GPU engine's hidden path
        np.testing.assert_allclose(vectors[0], vectors[1], atol=5e-3)  # unit vectors; F16 weights on cuda0
        status, body, _ = srv.request("GET", "/api/ps")
        running = {m["model"]: m for m in json.loads(body)["models"]}
        assert status == 200 and running["g:latest"]["size_vram"] == running["g:latest"]["size"] > 0
        assert running["c:latest"]["size_vram"] == 0
    finally:
        assert srv.stop() == 0


def _embed(srv, model, ids):
    status, body, _ = srv.request("POST", "/v1/embeddings", {"model": model, "input": ids}, timeout=600)
    assert status == 200, body
    return json.loads(body)["data"][0]["embedding"]


def test_a_missing_cuda_stack_refuses_the_model_not_the_server(golden):
    """NUMBA_ENABLE_CUDASIM=0 on a machine without a driver: the GPU model fails with a clear reason,
    the CPU model beside it serves."""
    if pytest.importorskip("numba").config.ENABLE_CUDASIM == 0:
        pytest.skip("this run has a real CUDA stack")
    srv = _serve(golden, ready_timeout=120, env={"NUMBA_ENABLE_CUDASIM": "0"})
    try:
        status, body = srv.get("/health")
        models = json.loads(body)["models"]
        assert status == 200 and models["c"]["state"] == "loaded"
        assert models["g"]["state"] == "failed" and "UnsupportedDevice" in models["g"]["reason"]
        assert "cuda0" in models["g"]["reason"]
    finally:
        assert srv.stop() == 0
