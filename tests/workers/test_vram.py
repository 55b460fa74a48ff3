"""GPU memory reclaim before a restart: workers/vram.Reclaim, and the supervisor's use of it with a stand-in NVML."""

import queue
from types import SimpleNamespace

import pytest

from pantheon.serve.dies import Die
from tests.pantheon.serve.test_dies import FakeNVML
from workers.restarts import RestartPolicy
from workers.supervisor import Supervisor
from workers.tables import DIE_DEGRADED, DIE_DOWN, DIE_STARTING, Tables, table_bytes
from workers.vram import RECOVERED, Reclaim

GIB = 1 << 30
UUID = "GPU-00000000-aaaa-bbbb-cccc-000000000000"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def reclaim(used, wait_s=5.0):
    clock = Clock()
    box = {"used": used}
    return Reclaim(lambda: box["used"], 1 * GIB, wait_s=wait_s, clock=clock), box, clock


def test_ready_once_most_of_the_memory_is_back():
    r, box, clock = reclaim(9 * GIB)
    r.begin()  # the dead worker held 8 GiB above the baseline
    assert r.state() == "waiting"
    box["used"] = 9 * GIB - int(RECOVERED * 8 * GIB) + 1
    assert r.state() == "waiting"
    box["used"] = 9 * GIB - int(RECOVERED * 8 * GIB)
    assert r.state() == "ready"


def test_degraded_after_the_bounded_wait_and_ready_if_it_comes_back_later():
    r, box, clock = reclaim(9 * GIB, wait_s=5.0)
    r.begin()
    clock.now += 4.9
    assert r.state() == "waiting"
    clock.now += 0.2
    assert r.state() == "degraded"
    box["used"] = 1 * GIB
    assert r.state() == "ready"


@pytest.mark.parametrize("peak,now", [(None, 5 * GIB), (1 * GIB, 5 * GIB), (9 * GIB, None)])
def test_ready_when_nothing_is_known_or_nothing_was_held(peak, now):
    """No reading (NVML gone) or a worker that held nothing: do not block the restart."""
    r, box, _ = reclaim(peak)
    r.begin()
    box["used"] = now
    assert r.state() == "ready"


def test_never_started_is_ready():
    r, _, _ = reclaim(9 * GIB)
    assert r.state() == "ready"


def gpu_supervisor(nvml):
    """A Supervisor with one CUDA die and only the parts the restart path touches (nothing forks)."""
    die = Die("cuda0", "cuda", 0, uuid=UUID, device_name="Fake GPU 0", memory_total=80 * GIB)
    sup = Supervisor.__new__(Supervisor)
    sup.die_list, sup.nvml, sup.reclaims = [die], nvml, {}
    sup.layout = SimpleNamespace(tables=Tables(bytearray(table_bytes(1)), 1))
    sup.dispatcher = SimpleNamespace(commands=queue.SimpleQueue())
    sup.restarts = {0: RestartPolicy(first_s=0.5)}
    sup.stopping, sup.aborted, sup.workers = None, {}, {}
    sup.spawned = []

    def spawn(d):
        sup.spawned.append(d)
        sup.layout.tables.dies[d]["state"] = DIE_STARTING

    sup.spawn_worker = spawn
    return sup


def set_used(nvml, used):
    uuid, name, total, _ = nvml.gpus[0]
    nvml.gpus[0] = (uuid, name, total, used)


@pytest.fixture
def nvml():
    return FakeNVML([(UUID, "Fake GPU 0", 80 * GIB, 2 * GIB)])


def test_baseline_is_read_by_uuid_before_any_worker(nvml):
    sup = gpu_supervisor(nvml)
    sup._baseline_vram()
    assert sup.reclaims[0].baseline == 2 * GIB
    assert nvml.inits == nvml.shutdowns


def test_restart_waits_for_nvml_to_show_the_memory_back(nvml):
    sup = gpu_supervisor(nvml)
    sup._baseline_vram()
    set_used(nvml, 30 * GIB)  # the worker's model and KV cache
    sup._worker_exited(0, 4242, -9)
    assert sup.layout.tables.dies[0]["state"] == DIE_DOWN and sup.reclaims[0].peak == 30 * GIB
    sup._restart_due(1e12)  # backoff long past; the driver still holds the dead context
    assert sup.spawned == [] and sup.layout.tables.dies[0]["state"] == DIE_DOWN
    set_used(nvml, 10 * GIB)  # 20 of 28 GiB back: under 75 %
    sup._restart_due(1e12)
    assert sup.spawned == []
    set_used(nvml, 8 * GIB)  # 22 of 28 GiB back
    sup._restart_due(1e12)
    assert sup.spawned == [0]
    assert nvml.inits == nvml.shutdowns


def test_memory_that_never_comes_back_marks_the_die_degraded(nvml):
    sup = gpu_supervisor(nvml)
    sup._baseline_vram()
    set_used(nvml, 30 * GIB)
    sup._worker_exited(0, 4242, -9)
    sup.reclaims[0].clock = lambda: sup.reclaims[0].started + sup.reclaims[0].wait_s + 1
    sup._restart_due(1e12)
    assert sup.spawned == [] and sup.layout.tables.dies[0]["state"] == DIE_DEGRADED
    set_used(nvml, 2 * GIB)  # the driver let go at last: the die restarts
    sup._restart_due(1e12)
    assert sup.spawned == [0] and sup.layout.tables.dies[0]["state"] == DIE_STARTING


def test_cpu_dies_restart_without_nvml():
    sup = gpu_supervisor(None)
    sup.die_list = [Die("cpu0", "cpu", 0, cores=(0,))]
    sup._baseline_vram()
    assert sup.reclaims == {}
    sup._worker_exited(0, 4242, -9)
    sup._restart_due(1e12)
    assert sup.spawned == [0]
