"""Dies: CPU core splits, CUDA discovery through a stand-in NVML, CUDA_VISIBLE_DEVICES mapping, placement."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT

from pantheon.serve import dies as dies_mod
from pantheon.serve.dies import Die, DieMemory, die_memory, discover_dies, resolve_placement, split_cores, visible_uuids
from pantheon.errors import UsageError
from pantheon.serve.settings import parse_serve_args

GIB = 1 << 30


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """The slice of pynvml that dies.py uses; handles are ('h', index); UUIDs come back as bytes, as
    older pynvml returned them. Counts init/shutdown so tests can check NVML is balanced."""

    NVMLError = FakeNVMLError

    def __init__(self, gpus, fail_init=False, fail_memory=()):
        self.gpus = gpus   # list of (uuid, name, total, used)
        self.fail_init, self.fail_memory = fail_init, set(fail_memory)
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        if self.fail_init:
            raise FakeNVMLError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def _live(self):
        if self.inits <= self.shutdowns:
            raise FakeNVMLError("Uninitialized")

    def nvmlDeviceGetCount(self):
        self._live()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._live()
        return ("h", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._live()
        for i, g in enumerate(self.gpus):
            if g[0] == (uuid.decode() if isinstance(uuid, bytes) else uuid):
                return ("h", i)
        raise FakeNVMLError("Not Found")

    def nvmlDeviceGetUUID(self, h):
        return self.gpus[h[1]][0].encode()

    def nvmlDeviceGetName(self, h):
        return self.gpus[h[1]][1]

    def nvmlDeviceGetMemoryInfo(self, h):
        if h[1] in self.fail_memory:
            raise FakeNVMLError("GPU is lost")
        uuid, _, total, used = self.gpus[h[1]]
        return SimpleNamespace(total=total, used=used, free=total - used)


def gpus(n):
    return [(f"GPU-{k:08x}-aaaa-bbbb-cccc-{k:012x}", f"Fake GPU {k}", (k + 1) * 10 * GIB, k * GIB)
            for k in range(n)]


def cuda_of(found):
    return {name: d.uuid for name, d in found.items() if d.kind == "cuda"}


# ---- CPU dies


@pytest.mark.parametrize("cores,n,groups", [
    ([0, 1], 1, [(0, 1)]),
    ([0, 1], 2, [(0,), (1,)]),
    ([3, 1, 2, 0], 2, [(0, 1), (2, 3)]),
    (range(10), 3, [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)]),
    ([0, 2, 4, 6, 8], 2, [(0, 2, 4), (6, 8)]),
    (range(16), 16, [(k,) for k in range(16)]),
])
def test_split_cores(cores, n, groups):
    assert split_cores(cores, n) == tuple(groups)


def test_more_cpu_dies_than_cores():
    with pytest.raises(UsageError, match=r"--cpu-dies 3: more dies than the 2 cores this process may use \(4-5\)"):
        split_cores([5, 4], 3)
    with pytest.raises(UsageError, match=r"\(0-2,7\)"):
        split_cores([0, 1, 2, 7], 5)


def test_cpu_dies_named_and_default_cores():
    found = discover_dies(1, nvml=FakeNVML([]), environ={})
    assert found == {"cpu0": Die("cpu0", "cpu", 0, cores=tuple(sorted(os.sched_getaffinity(0))))}


def test_discover_cpu_dies_on_fake_cores():
    found = discover_dies(2, nvml=FakeNVML([]), environ={}, cores=[7, 6, 5, 4, 3])
    assert [(d.name, d.cores) for d in found.values()] == [("cpu0", (3, 4, 5)), ("cpu1", (6, 7))]


# ---- CUDA_VISIBLE_DEVICES


UUIDS = [g[0] for g in gpus(4)]


@pytest.mark.parametrize("visible,order", [
    (None, [0, 1, 2, 3]), ("0,1,2,3", [0, 1, 2, 3]), ("2,3", [2, 3]), ("3,1", [3, 1]),
    ("", []), ("-1", []), ("1,7,2", [1]), ("1,1,2", [1]), ("2, 0", [2, 0]), ("junk,0", []),
    (UUIDS[3], [3]), (f"{UUIDS[2]},{UUIDS[0]}", [2, 0]), (f"1,{UUIDS[0]}", [1, 0]),
    ("GPU-00000002", [2]), ("GPU-0000000", []), ("GPU-ffff", []), ("MIG-1234", []),
])
def test_visible_uuids(visible, order):
    assert visible_uuids(visible, UUIDS) == [UUIDS[k] for k in order]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_cuda_dies_all_visible(n):
    nvml = FakeNVML(gpus(n))
    found = discover_dies(1, nvml=nvml, environ={}, cores=[0])
    assert list(found) == ["cpu0"] + [f"cuda{k}" for k in range(n)]
    for k in range(n):
        uuid, name, total, _ = gpus(n)[k]
        assert found[f"cuda{k}"] == Die(f"cuda{k}", "cuda", k, uuid=uuid, device_name=name, memory_total=total)
    assert nvml.inits == nvml.shutdowns == 1


def test_cuda_ordinals_are_relative_to_visible_devices():
    found = discover_dies(1, nvml=FakeNVML(gpus(4)), environ={"CUDA_VISIBLE_DEVICES": "3,1"}, cores=[0])
    assert cuda_of(found) == {"cuda0": UUIDS[3], "cuda1": UUIDS[1]}
    assert found["cuda0"].memory_total == 40 * GIB


def test_cuda_visible_devices_by_uuid():
    env = {"CUDA_VISIBLE_DEVICES": f"{UUIDS[2]},GPU-00000000"}
    found = discover_dies(1, nvml=FakeNVML(gpus(4)), environ=env, cores=[0])
    assert cuda_of(found) == {"cuda0": UUIDS[2], "cuda1": UUIDS[0]}


def test_cuda_visible_devices_empty_hides_all():
    assert cuda_of(discover_dies(1, nvml=FakeNVML(gpus(2)), environ={"CUDA_VISIBLE_DEVICES": ""}, cores=[0])) == {}


def test_failed_nvml_means_no_cuda_dies():
    assert list(discover_dies(1, nvml=FakeNVML(gpus(2), fail_init=True), environ={}, cores=[0])) == ["cpu0"]


def test_nvml_failing_midway_means_no_cuda_dies_and_balanced_shutdown():
    nvml = FakeNVML(gpus(3), fail_memory={1})
    assert list(discover_dies(1, nvml=nvml, environ={}, cores=[0])) == ["cpu0"]
    assert nvml.inits == nvml.shutdowns == 1


def test_missing_pynvml_means_no_cuda_dies(monkeypatch):
    monkeypatch.setattr(dies_mod, "import_nvml", lambda: None)
    assert list(discover_dies(1, environ={}, cores=[0, 1])) == ["cpu0"]


def test_import_does_not_touch_nvml_or_cuda():
    code = ("import sys, pantheon.serve.dies, pantheon.serve.settings; "
            "bad = [m for m in ('pynvml', 'cupy', 'numba') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]"


# ---- memory


def test_die_memory():
    nvml = FakeNVML(gpus(3), fail_memory={2})
    found = discover_dies(1, nvml=FakeNVML(gpus(3)), environ={}, cores=[0])
    assert die_memory(found, nvml=nvml) == {"cpu0": None, "cuda0": DieMemory(used=0, total=10 * GIB),
                                            "cuda1": DieMemory(used=GIB, total=20 * GIB), "cuda2": None}
    assert nvml.inits == nvml.shutdowns == 1


def test_die_memory_without_nvml():
    found = discover_dies(1, nvml=FakeNVML(gpus(2)), environ={}, cores=[0])
    assert die_memory(found, nvml=FakeNVML(gpus(2), fail_init=True)) == dict.fromkeys(found)


def test_die_memory_cpu_only_never_loads_nvml(monkeypatch):
    monkeypatch.setattr(dies_mod, "import_nvml", lambda: pytest.fail("NVML loaded for CPU dies"))
    assert die_memory({"cpu0": Die("cpu0", "cpu", 0, cores=(0,))}) == {"cpu0": None}


# ---- placement


def config(*argv):
    return parse_serve_args(list(argv), {})


def test_placement_default_cpu0_and_shared_cpu_die():
    found = discover_dies(2, nvml=FakeNVML(gpus(2)), environ={}, cores=[0, 1, 2, 3])
    c = config("--model", "a", "--model", "b", "--dies", "cpu0", "--model", "c", "--dies", "1,0")
    placed = resolve_placement(c, found)
    assert placed == {0: (found["cpu0"],), 1: (found["cpu0"],), 2: (found["cuda1"], found["cuda0"])}


def test_unknown_cuda_die_refused():
    found = discover_dies(2, nvml=FakeNVML([]), environ={}, cores=[0, 1])
    with pytest.raises(UsageError) as e:
        resolve_placement(config("--model", "a", "--name", "big", "--dies", "3"), found)
    assert str(e.value).startswith("--dies 3: no such die (model 'big'); available: cpu0, cpu1 (no CUDA device")


def test_unknown_cpu_die_refused():
    found = discover_dies(2, nvml=FakeNVML(gpus(2)), environ={}, cores=[0, 1])
    with pytest.raises(UsageError) as e:
        resolve_placement(config("--model", "a.gguf", "--dies", "cpu2"), found)
    assert str(e.value) == "--dies cpu2: no such die (model 'a.gguf'); available: cpu0, cpu1, cuda0, cuda1"


def test_hidden_cuda_die_refused():
    found = discover_dies(1, nvml=FakeNVML(gpus(4)), environ={"CUDA_VISIBLE_DEVICES": "2"}, cores=[0])
    assert resolve_placement(config("--model", "a", "--dies", "0"), found)[0][0].uuid == UUIDS[2]
    with pytest.raises(UsageError, match=r"^--dies 1: no such die .*available: cpu0, cuda0$"):
        resolve_placement(config("--model", "a", "--dies", "0,1"), found)


def test_pin_to_die():
    mine = sorted(os.sched_getaffinity(0))
    die = Die("cpu0", "cpu", 0, cores=(mine[0],))
    try:
        assert dies_mod.pin_to_die(die) == 1
        assert os.sched_getaffinity(0) == {mine[0]}
    finally:
        os.sched_setaffinity(0, mine)
