"""pantheon-ctl fit: the report carries pantheon.serve.fit's own estimate and verdict for the bundled demo model."""

import io
import json

import pytest

from pantheon.ctl import main as ctl
from pantheon.serve.memory import MemInfo
from pantheon.serve.limits import DEFAULT_MAX_SESSIONS
from pantheon.serve.settings import batch_slots_of, parse_serve_args
from tests.pantheon.gguf.craft import VT, gguf_bytes, gstr, kv

fit = pytest.importorskip("pantheon.serve.fit")
ctl_fit = pytest.importorskip("pantheon.ctl.fit")


def demo():
    from pantheon.demo import demo_model_path

    return str(demo_model_path())


def availabilities(fit_module, estimate):
    """One available-bytes value per verdict kind, found by bisecting pantheon.serve.fit.verdict itself."""
    def kind(available):
        return fit_module.verdict(estimate, available).kind

    lo, hi = 1, 1 << 50
    found = {kind(lo): lo, kind(hi): hi}
    for _ in range(60):
        mid = (lo + hi) // 2
        found.setdefault(kind(mid), mid)
        lo, hi = (mid, hi) if kind(mid) == "DOES-NOT-FIT" else (lo, mid)
    return found


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    return ctl.main(list(argv), {}, out, err), out.getvalue(), err.getvalue()


def test_report_is_fits_own_verdict():
    est = fit.estimate(demo(), dies=("cpu0",), ctx=2048, slots=2, shared_files=(), sessions=DEFAULT_MAX_SESSIONS)
    for available in availabilities(fit, est).values():
        reference = fit.verdict(est, available)
        report = ctl_fit.fit_report(demo(), ("cpu0",), 2048, 2, available=available)
        assert (report["verdict"], report["reason"], report["numbers"]) == (
            reference.kind, reference.reason, dict(reference.numbers))
        assert report["estimate"] == est
        assert (report["available"], report["available_source"], report["vram_available"]) == (
            available, "--available", None)


def test_report_is_the_servers_admission_of_the_same_flags():
    """pantheon-ctl fit judges the load pantheon-serve would admit for the same --model flags."""
    config = parse_serve_args(["--model", demo(), "--ctx-cap", "2048", "--batch-slots", "2"], environ={})
    spec = config.models[0]
    server = fit.admission(spec, batch_slots_of(spec, config.batch_slots), config.quantize,
                           MemInfo(None, 3 << 30, "--available"), None, shared_files=())
    report = ctl_fit.fit_report(demo(), ("cpu0",), 2048, 2, available=3 << 30)
    assert (report["verdict"], report["numbers"], report["estimate"]) == (server.kind, dict(server.numbers),
                                                                       server.estimate)
    assert report["estimate"].sessions == DEFAULT_MAX_SESSIONS and report["estimate"].slots == 2


def test_default_is_the_measured_available_ram():
    from pantheon.serve.memory import available_ram

    report = ctl_fit.fit_report(demo(), ("cpu0",), 4096, 4)
    assert report["available_source"] == available_ram().source
    assert report["available"] > 0 and report["verdict"] in ctl.FIT_EXIT


def test_ctx_is_the_estimates_after_clamping():
    est = fit.estimate(demo(), dies=("cpu0",), ctx=1 << 20, slots=1, shared_files=())
    assert ctl_fit.fit_report(demo(), ("cpu0",), 1 << 20, 1, available=1 << 40)["ctx"] == est.ctx


def test_cuda_dies_with_given_vram():
    est = fit.estimate(demo(), dies=("cuda0", "cuda1"), ctx=4096, slots=4, shared_files=(),
                       sessions=DEFAULT_MAX_SESSIONS)
    for vram in (1 << 40, 1 << 10):
        free = {"cuda0": vram, "cuda1": vram}
        reference = fit.verdict(est, 1 << 40, None, free)
        report = ctl_fit.fit_report(demo(), ("cuda0", "cuda1"), 4096, 4, available=1 << 40, vram=vram)
        assert (report["verdict"], report["vram_available"], report["vram_source"]) == (reference.kind, free, "--vram")
    assert reference.kind == "DOES-NOT-FIT"


def test_cuda_dies_unmeasured_are_refused():
    """Free VRAM comes from NVML (pantheon.serve.dies); a die it cannot read makes the verdict REFUSED."""
    measured = fit.free_vram(("cuda0",))
    report = ctl_fit.fit_report(demo(), ("cuda0",), 4096, 4, available=1 << 40)
    assert (sorted(report["vram_available"]), report["vram_source"]) == (sorted(measured), "nvml")
    if not measured:
        assert report["verdict"] == "REFUSED" and "cuda0: free memory unknown" in report["reason"]
        assert run("fit", demo(), "--dies", "0", "--available", "1T")[0] == 3


def test_unknown_architecture_is_refused(tmp_path):
    path = tmp_path / "odd.gguf"
    path.write_bytes(gguf_bytes([kv("general.architecture", VT.STRING, gstr("nonesuch"))], []))
    rc, out, err = run("fit", str(path), "--available", "1G", "--json")
    report = json.loads(out)
    assert (rc, err, report["verdict"], report["numbers"]) == (3, "", "REFUSED", {})
    assert report["reason"].startswith(f"{path}: ") and "nonesuch" in report["reason"]


def test_text_names_verdict_assumptions_and_numbers():
    report = ctl_fit.fit_report(demo(), ("cpu0",), 4096, 4, available=8 << 30)
    text = ctl_fit.fit_text(report)
    lines = text.splitlines()
    assert lines[0] == f"{report['verdict']}: {report['reason']}"
    assert lines[1] == f"  model {demo()} on cpu0, ctx {report['ctx']}, 4 slots; RAM available 8.0 GiB (--available)"
    assert [line.split()[0] for line in lines[2:]] == list(report["numbers"])
    assert f"({report['numbers']['total']:,} bytes)" in text


def test_vram_flag_parses_sizes():
    assert ctl.parse_ctl_args(["fit", "m", "--dies", "0", "--vram", "80G"], {}).vram == 80 << 30
