"""Effective available RAM from fake /proc and cgroup trees; pressure levels and their hysteresis."""

import threading

import pytest

from pantheon.serve.dies import DieMemory
from pantheon.serve.memory import (Hysteresis, MemInfo, PressureLevel, PressureMonitor, Thresholds,
                             available_ram, level_for, watch)

GiB = 1 << 30
MiB = 1 << 20
L = PressureLevel


def fake_proc(tmp_path, total_kib=16 * 1024 * 1024, avail_kib=12 * 1024 * 1024, cgroup="0::/\n"):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       {total_kib} kB\nMemFree:         1000 kB\n"
                                  f"MemAvailable:   {avail_kib} kB\nBuffers:          10 kB\n")
    (proc / "self" / "cgroup").write_text(cgroup)
    return proc


def cgroup_dir(root, path, **files):
    d = root.joinpath(*[p for p in path.split("/") if p])
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text)
    return d


def test_host_only_without_cgroup_memory_controller(tmp_path):
    proc = fake_proc(tmp_path, cgroup="3:cpu:/x\n")
    m = available_ram(proc, tmp_path / "cg")
    assert m == MemInfo(16 * GiB, 12 * GiB, "host")


def test_v2_limit_below_host(tmp_path):
    proc = fake_proc(tmp_path, cgroup="0::/svc/app\n")
    cg = tmp_path / "cg"
    cgroup_dir(cg, "/svc/app", memory_max=str(4 * GiB), memory_current=str(3 * GiB),
               memory_stat=f"anon 123\ninactive_file {512 * MiB}\nactive_file 99\n")
    m = available_ram(proc, cg)
    # 4 GiB limit - (3 GiB charged - 512 MiB reclaimable inactive file pages)
    assert m == MemInfo(4 * GiB, 1536 * MiB, "cgroup2:/svc/app")


def test_v2_max_means_no_limit(tmp_path):
    proc = fake_proc(tmp_path, cgroup="0::/svc/app\n")
    cg = tmp_path / "cg"
    cgroup_dir(cg, "/svc/app", memory_max="max\n", memory_current=str(15 * GiB))
    assert available_ram(proc, cg) == MemInfo(16 * GiB, 12 * GiB, "host")


def test_v2_tighter_parent_decides(tmp_path):
    proc = fake_proc(tmp_path, cgroup="0::/svc/app\n")
    cg = tmp_path / "cg"
    cgroup_dir(cg, "/svc/app", memory_max=str(8 * GiB), memory_current=str(1 * GiB))
    cgroup_dir(cg, "/svc", memory_max=str(6 * GiB), memory_current=str(5 * GiB))
    m = available_ram(proc, cg)
    assert m == MemInfo(6 * GiB, 1 * GiB, "cgroup2:/svc")


def test_v2_child_limit_smaller_but_parent_has_less_free(tmp_path):
    proc = fake_proc(tmp_path, cgroup="0::/svc/app\n")
    cg = tmp_path / "cg"
    cgroup_dir(cg, "/svc/app", memory_max=str(2 * GiB), memory_current=str(1 * GiB))
    cgroup_dir(cg, "/svc", memory_max=str(10 * GiB), memory_current=str(int(9.5 * GiB)))
    m = available_ram(proc, cg)
    assert (m.total, m.available, m.source) == (2 * GiB, GiB // 2, "cgroup2:/svc")


def test_v1_limit_and_huge_unlimited_parent(tmp_path):
    proc = fake_proc(tmp_path, cgroup="5:cpuacct,cpu:/\n4:memory:/docker/abc\n0::/\n")
    cg = tmp_path / "cg"
    cgroup_dir(cg / "memory", "/docker/abc", memory_limit_in_bytes=str(3 * GiB),
               memory_usage_in_bytes=str(2 * GiB), memory_stat=f"inactive_file 1\ntotal_inactive_file {GiB}\n")
    cgroup_dir(cg / "memory", "/docker", memory_limit_in_bytes="9223372036854771712\n",
               memory_usage_in_bytes=str(14 * GiB))
    assert available_ram(proc, cg) == MemInfo(3 * GiB, 2 * GiB, "cgroup1:/docker/abc")


def test_self_cgroup_text_overrides_proc(tmp_path):
    proc = fake_proc(tmp_path, cgroup="0::/\n")
    cg = tmp_path / "cg"
    cgroup_dir(cg, "/other", memory_max=str(GiB), memory_current="0")
    assert available_ram(proc, cg, self_cgroup="0::/other\n").source == "cgroup2:/other"


def test_missing_memavailable_falls_back_to_free_buffers_cached(tmp_path):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n")
    (proc / "self" / "cgroup").write_text("")
    assert available_ram(proc, tmp_path) == MemInfo(1000 * 1024, 420 * 1024, "host")


def test_levels_of_single_readings():
    th = Thresholds()
    total = 100 * GiB
    assert level_for(30 * GiB, total, th) == L.OK
    assert level_for(20 * GiB, total, th) == L.WATCH
    assert level_for(10 * GiB, total, th) == L.TIGHT
    assert level_for(6 * GiB, total, th) == L.CRITICAL
    assert level_for(400 * MiB, 1 * GiB, th) == L.CRITICAL  # 39 % free but under the 512 MiB floor


class Readings:
    """A source that replays available fractions of a 100 GiB machine."""

    def __init__(self, fractions, total=100 * GiB):
        self.values, self.total = list(fractions), total

    def __call__(self):
        return int(self.values.pop(0) * self.total), self.total


def run(monitor, n):
    return [monitor.update() for _ in range(n)]


def test_down_is_immediate_up_needs_margin_and_streak():
    src = Readings([0.5, 0.2, 0.12, 0.05, 0.09, 0.11, 0.11, 0.11, 0.2, 0.2, 0.2, 0.4, 0.4, 0.4])
    mon = PressureMonitor(src, Thresholds(), Hysteresis(margin=0.03, updates=3))
    assert run(mon, 14) == [L.OK, L.WATCH, L.TIGHT, L.CRITICAL,
                            # 0.09 is above 7 % but not by 3 points: stays CRITICAL
                            L.CRITICAL,
                            L.CRITICAL, L.CRITICAL, L.TIGHT,     # 0.11 clears 7 %+3 three times
                            L.TIGHT, L.TIGHT, L.WATCH,           # 0.20 clears 15 %+3, not 25 %+3
                            L.WATCH, L.WATCH, L.OK]


def test_oscillation_around_a_threshold_does_not_flap():
    src = Readings([0.14, 0.16] * 20)
    mon = PressureMonitor(src, Thresholds(), Hysteresis(margin=0.03, updates=2))
    assert set(run(mon, 40)) == {L.TIGHT}


def test_a_bad_reading_resets_the_streak():
    src = Readings([0.1, 0.3, 0.3, 0.1, 0.3, 0.3, 0.3])
    mon = PressureMonitor(src, Thresholds(), Hysteresis(margin=0.03, updates=3))
    assert run(mon, 7) == [L.TIGHT, L.TIGHT, L.TIGHT, L.TIGHT, L.TIGHT, L.TIGHT, L.OK]


def test_one_die_vram_makes_it_critical():
    vram = {"cpu0": None, "cuda0": DieMemory(used=10 * GiB, total=80 * GiB),
            "cuda1": DieMemory(used=79 * GiB, total=80 * GiB)}
    mon = PressureMonitor(Readings([0.9]), vram_source=lambda: vram)
    assert mon.update() == L.CRITICAL
    snap = mon.snapshot()
    assert snap["level"] == "CRITICAL" and snap["ram"]["level"] == "OK"
    assert snap["dies"]["cuda1"] == {"level": "CRITICAL", "available_bytes": GiB, "total_bytes": 80 * GiB,
                                     "fraction": 0.0125}
    assert snap["dies"]["cuda0"]["level"] == "OK" and "cpu0" not in snap["dies"]


def test_watch_reports_changes_until_stopped():
    src = Readings([0.5, 0.5, 0.1, 0.1, 0.05, 0.5, 0.5])
    mon = PressureMonitor(src)
    stop, changes = threading.Event(), []

    def on_change(old, new, snap):
        changes.append((old, new, snap["level"]))
        if new == L.CRITICAL:
            stop.set()

    watch(mon, 0, on_change, stop)
    assert changes == [(L.OK, L.TIGHT, "TIGHT"), (L.TIGHT, L.CRITICAL, "CRITICAL")]
    assert len(src.values) == 2


def test_real_machine_reading_is_sane():
    m = available_ram()
    assert 0 <= m.available <= m.total
    pytest.importorskip("psutil")
    import psutil
    assert m.total <= psutil.virtual_memory().total
