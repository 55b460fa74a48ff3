"""GPU engine figures on an 8B-shaped random model, with the device's copy roof and a torch fp16 reference.

Prints one JSON line. Run by benchmarks/gpu_check.sh on the device; `--small` runs the same code on a
tiny shape (the CPU half, in the simulator, in CI).
"""

import argparse
import dataclasses
import json
import sys
import traceback

import numpy as np

from benchmarks import gpu_profile
from benchmarks.gpu_model import MIXES, Shape, decode_bytes, make_model
from benchmarks.gpu_profile import timed
from pantheon.engine.cuda import layers
from pantheon.engine.cuda.backend import open_backend
from pantheon.engine.cuda.ops import Ops

SMALL = Shape(dim=256, n_layer=1, n_head=4, n_head_kv=2, n_ff=256, n_vocab=256)  # K-quants need 256 columns


def copy_bandwidth(b, nbytes):
    """Bytes read plus written per second by a device-to-device copy."""
    src = b.zeros((nbytes // 4,), np.float32)  # [n]
    dst = b.empty((nbytes // 4,), np.float32)  # [n]

    def copy():
        if b.sim:
            dst[...] = src
        else:
            with b.stream:
                dst[...] = src
    return 2 * nbytes / timed(b, copy, 5)


def launch_cost(b):
    """Seconds of one launch of a small kernel from Python (the per-kernel cost a decode step pays)."""
    x, y = b.zeros((1, 32)), b.zeros((1, 32))  # [1, 32] each
    return timed(b, lambda: b.launch(layers.add, 1, 32)(x, y), 200)


def mix_figures(b, mix, shape, prompt, steps, streams, profile=False):
    """engine_figures with int8 activations; if those kernels fail on this device, the float kernels' figures
    (decode_tok_s then measures them too) and the error, so one device run still reports every bar."""
    try:
        return engine_figures(b, mix, shape, prompt, steps, streams, profile=profile)
    except Exception as e:
        fig = engine_figures(b, mix, shape, prompt, steps, streams, int8=False, profile=profile)
        return {**fig, "int8_error": f"{type(e).__name__}: {e}"[:500]}


def engine_figures(b, mix, shape, prompt, steps, streams, int8=True, profile=False):
    """Prefill, eager and captured decode (one stream and `streams`) of a fresh model of `mix`, freed after."""
    model = make_model(b, mix, shape)
    try:
        model.int8 = int8
        model.allocate(prompt + 3 * steps + 8, streams + 1)
        fig = measure(b, model, shape, prompt, steps, streams)
        if profile:
            fig.update(step_kernels(b, model, prompt))
        return fig
    finally:
        model.close()


def measure(b, model, shape, prompt, steps, streams):
    toks = np.random.default_rng(1).integers(0, shape.n_vocab, prompt).tolist()
    pre = timed(b, lambda: model.forward([(model.new_cache(), toks)]), 2)
    cache = model.new_cache()
    model.forward([(cache, toks)])
    eager, launches = decode_eager(b, model, cache, steps)
    caches = [model.new_cache() for _ in range(streams)]
    model.forward([(c, toks[:8]) for c in caches])
    out = {"prefill_tok_s": prompt / pre, "decode_eager_tok_s": 1 / eager, "bytes_per_token": decode_bytes(model),
           "launches_per_step": launches}
    for on, tag in ((False, "f32act_"), (model.int8, "")):  # the two decode kernels (matvec.py, matvec8.py)
        model.int8 = on
        one, many = decode_rates(b, model, cache, caches, steps)
        out[f"decode_{tag}tok_s"], out[f"decode_{tag}{streams}x_tok_s"] = 1 / one, streams / many
    return out


def step_kernels(b, model, prompt):
    """Device time per kernel of one prefill of `prompt` tokens and of one single-stream decode step (eager)."""
    toks = list(range(1, prompt + 1))
    pre = gpu_profile.kernel_times(b, lambda: model.forward([(model.new_cache(), toks)]))
    cache = model.new_cache()
    model.forward([(cache, toks)])
    model.graphs = False
    try:
        step = gpu_profile.kernel_times(b, lambda: model.forward([(cache, [7])]))
    finally:
        model.graphs = True
    return {"prefill_kernels_ms": pre, "decode_kernels_ms": step}


def decode_rates(b, model, cache, caches, steps):
    """Seconds per replayed decode step (graph.py) of one stream and of all `caches` together."""
    one = timed(b, lambda: model.forward([(cache, [7])]), steps)
    return one, timed(b, lambda: model.forward([(c, [7]) for c in caches]), steps)


def decode_eager(b, model, cache, steps):
    """(seconds per single-stream step launched kernel by kernel from Python, launches per step)."""
    model.graphs = False
    before = b.launches
    eager = timed(b, lambda: model.forward([(cache, [7])]), steps)
    model.graphs = True
    return eager, (b.launches - before) // (steps + 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--mixes", default=",".join(MIXES))
    ap.add_argument("--torch", action="store_true", help="add the torch fp16 reference (device only)")
    ap.add_argument("--profile", action="store_true", help="device time per kernel, decode kernel geometries")
    args = ap.parse_args()
    b = open_backend(0)
    shape, prompt, steps, streams = (SMALL, 9, 1, 2) if args.small else (Shape(), 512, 32, 8)
    copy = copy_bandwidth(b, 1 << (12 if args.small else 31))
    report = {"device": "simulator" if b.sim else "cuda0", "copy_bytes_s": copy,
              "launch_s": launch_cost(b)}
    if args.profile:  # first: the mixes below run at the geometry the sweep found fastest
        rows = 32 if b.sim else 4 * shape.n_ff  # several times the L2 on a device; a code path in the simulator
        report["geometry_gb_s"] = guarded(lambda: gpu_profile.geometry_sweep(b, Ops(b), rows, shape.dim))
        progress(report)
        tune(b, report)
    for mix in args.mixes.split(","):
        report[mix] = guarded(lambda: with_ratios(mix_figures(b, mix, shape, prompt, steps, streams, args.profile),
                                                  report, streams))
        progress(report)
    if args.torch:
        from benchmarks.gpu_torch_ref import torch_figures

        report["torch_fp16"] = guarded(lambda: torch_figures(shape, prompt, steps))
    report["bars"] = bars(report, streams)
    print_table(report, args.mixes.split(","), streams)
    print(json.dumps(report))


def bars(report, streams):
    """#12's device bars on Q4_0, each True/False (None where a figure is missing)."""
    q, t = report.get("Q4_0", {}), report.get("torch_fp16", {})
    if "decode_tok_s" not in q:
        return None
    torch_decode = t.get("decode_tok_s")
    return {"decode_roof_ge_0.3": q["decode_roof_ratio"] >= 0.3,
            "decode_ahead_of_torch_fp16": None if torch_decode is None else q["decode_tok_s"] > torch_decode,
            f"{streams}x_ge_4x_one_stream": q[f"decode_{streams}x_tok_s"] >= 4 * q["decode_tok_s"],
            "prefill_ge_5000": q["prefill_tok_s"] >= 5000}


def tune(b, report):
    """Launch the decode kernels at the sweep's best geometry for int8 activations (on a GPU; recorded)."""
    sweep = report["geometry_gb_s"]
    if b.sim or "error" in sweep:
        return
    lanes, per = gpu_profile.best_geometry(sweep)
    b.geometry = dataclasses.replace(b.geometry, lanes=lanes, rows=per)
    report["geometry"] = f"{lanes}x{per}"


def guarded(measure):
    """measure()'s figures, or the error that stopped it: a device run is too scarce to lose the other mixes."""
    try:
        return measure()
    except Exception as e:
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}"[:1000]}


def progress(report):
    """The figures so far, on stderr: what a run stopped by its time limit still tells."""
    print(json.dumps(report), file=sys.stderr, flush=True)


def with_ratios(fig, report, streams):
    """`fig` plus the ratios a reader wants: decode against the copy roof, launch share, the two speedups."""
    fig["decode_roof_ratio"] = fig["decode_tok_s"] * fig["bytes_per_token"] / report["copy_bytes_s"]
    # share of an eager step spent launching from Python: what the captured step (graph.py) removes
    fig["launch_share"] = fig["launches_per_step"] * report["launch_s"] * fig["decode_eager_tok_s"]
    fig["graph_speedup"] = fig["decode_tok_s"] / fig["decode_eager_tok_s"]
    fig["int8_speedup"] = fig["decode_tok_s"] / fig["decode_f32act_tok_s"]  # int8 against float activations
    fig["int8_speedup_8x"] = fig[f"decode_{streams}x_tok_s"] / fig[f"decode_f32act_{streams}x_tok_s"]
    return fig


def print_table(report, mixes, streams):
    """The figures a reader compares, one row per weight mix (the JSON line after it has them all)."""
    copy, launch = report["copy_bytes_s"] / 1e9, report["launch_s"] * 1e6
    print(f"{report['device']}: copy {copy:.1f} GB/s, one launch {launch:.1f} us, decode geometry "
          f"{report.get('geometry', 'default')}; tokens/s below")
    print("decode and Nx: int8 activations, captured; eager: launched from Python; f32act: float activations")
    print(f"{'mix':8} {'prefill':>9} {'decode':>8} {'eager':>8} {'f32act':>8} {f'{streams}x':>8} "
          f"{f'f32act {streams}x':>11} {'roof':>6} {'launches':>8}")
    for mix in mixes:
        f = report[mix]
        if "error" in f:
            print(f"{mix:8} failed: {f['error']}")
            continue
        print(f"{mix:8} {f['prefill_tok_s']:9.1f} {f['decode_tok_s']:8.1f} {f['decode_eager_tok_s']:8.1f} "
              f"{f['decode_f32act_tok_s']:8.1f} {f[f'decode_{streams}x_tok_s']:8.1f} "
              f"{f[f'decode_f32act_{streams}x_tok_s']:11.1f} {f['decode_roof_ratio']:6.3f} {f['launches_per_step']:8d}")
    t = report.get("torch_fp16")
    if t is not None:
        line = t.get("error") or f"prefill {t['prefill_tok_s']:.1f}, decode {t['decode_tok_s']:.1f} tokens/s"
        print(f"torch fp16 reference (Q4_0's weights dequantized): {line}")
    print(f"bars (Q4_0): {report['bars']}")
    for mix in mixes:
        for key in ("prefill_kernels_ms", "decode_kernels_ms"):
            if key in report[mix]:
                gpu_profile.print_times(f"{mix} {key[:-11]}", report[mix][key])
    if isinstance(report.get("geometry_gb_s"), dict) and "error" not in report["geometry_gb_s"]:
        print("decode kernel GB/s by geometry (lanes x rows per block), one vector, ffn-sized matrix:")
        gpu_profile.print_sweep(report["geometry_gb_s"])


if __name__ == "__main__":
    main()
