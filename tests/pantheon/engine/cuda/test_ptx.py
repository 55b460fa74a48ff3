"""Every GPU kernel compiles to PTX for the H200 (sm_90) with numba's CUDA compiler: the simulator runs
Python, so only this proves the kernels type-check as CUDA code. Skips where no NVVM/NVRTC is installed."""

import os
import subprocess
import sys

import pytest

from tests.pantheon.engine.cuda.ptx_compile import SIGNATURES
from tests.workers.serving import ROOT


@pytest.mark.slow  # minutes of NVVM time; gpu_check.sh runs it with --run-slow
def test_every_kernel_compiles_for_sm_90():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "tests/pantheon/engine/cuda/ptx_compile.py")], env=env,
                         capture_output=True, text=True, timeout=900)
    if out.returncode == 3:
        pytest.skip(out.stdout.strip())
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.count(" ok ") == len(SIGNATURES)
