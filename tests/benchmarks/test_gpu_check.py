"""The CPU half of benchmarks/gpu_check.sh: the carried tree installs from its wheel, and the benchmark's
model maker and measurements run (at a tiny shape, in the simulator) and print their JSON line."""

import json
import os
import subprocess
import sys
import zipfile

from tests.workers.serving import ROOT


def test_wheels_script_builds_an_installable_tree(tmp_path):
    whl = tmp_path / "whl"
    env = {**os.environ, "WHEEL_DIR": str(whl), "GPU_WHEELS_OFFLINE": "1", "PYTHON": sys.executable}
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_wheels.sh")], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=600)
    wheels = sorted(whl.glob("pantheon-*.whl"))
    assert wheels, list(whl.iterdir())
    assert "pantheon/engine/cuda/matvec.py" in zipfile.ZipFile(wheels[0]).namelist()
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    *map(str, wheels)], check=True, timeout=300)
    out = subprocess.run([sys.executable, "-c", "import pantheon.engine.cuda.model as m; print(m.__file__)"],
                         env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    assert out.stdout.startswith(str(site))


def test_benchmark_runs_its_model_maker_and_reports_every_figure():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu_bench", "--small", "--mixes", "Q4_K_M", "--profile"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["device"] == "simulator" and report["copy_bytes_s"] > 0 and report["launch_s"] > 0
    for mix in ("Q4_K_M",):  # Q4_K and Q6_K blocks; Q4_0 and Q8_0 makers differ only in the table
        fig = report[mix]
        assert {"prefill_tok_s", "decode_tok_s", "decode_2x_tok_s", "bytes_per_token", "decode_roof_ratio",
                "launches_per_step", "decode_eager_tok_s", "graph_speedup", "decode_f32act_tok_s",
                "decode_f32act_2x_tok_s", "int8_speedup", "int8_speedup_8x"} <= set(fig)
        assert fig["bytes_per_token"] > 0 and fig["launches_per_step"] > 0
        # --profile: device time per kernel of a prefill and a decode step, and the geometry sweep
        assert {"qmv8", "attention", "rms_norm"} <= set(fig["decode_kernels_ms"])
        assert {"dequant_tile", "cublas_matmul"} <= set(fig["prefill_kernels_ms"])
    assert set(report["geometry_gb_s"]) == {"Q4_0", "Q8_0", "Q4_K", "Q6_K"}


def test_benchmark_reports_the_float_figures_and_the_error_when_int8_kernels_fail(monkeypatch):
    """One device run must not lose every figure to the int8 kernels failing (compile or driver)."""
    from benchmarks import gpu_bench
    from pantheon.engine.cuda.backend import open_backend
    from pantheon.engine.cuda.ops import Ops

    def broken(self, x, work=None):
        raise RuntimeError("no dp4a here")

    monkeypatch.setattr(Ops, "quantize_units", broken)
    fig = gpu_bench.mix_figures(open_backend(0), "Q4_0", gpu_bench.SMALL, 9, 1, 2)
    assert fig["int8_error"] == "RuntimeError: no dp4a here"
    assert fig["decode_tok_s"] > 0 and fig["decode_f32act_2x_tok_s"] > 0 and fig["prefill_tok_s"] > 0
