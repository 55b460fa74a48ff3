"""The fleet's bookkeeping: validation of registry bodies, heartbeats that (re)register, eviction, drains."""

import pytest

from pantheon.router.fleet import Fleet, FleetError
from pantheon.router.programmer import weight_of


def body(iid="10.0.0.1:8080", models=("A",), **extra):
    return {"instance": iid, "address": iid, "models": list(models), **extra}


def test_register_heartbeat_and_dedup_models():
    fleet = Fleet(3.0)
    fleet.register(body("h1:1", ("A",)), None, 0.0)
    fleet.register(body("h2:1", ("A", "B")), None, 0.0)
    fleet.heartbeat(body("h3:1", ("B",)), None, 0.5)  # an unknown instance joins by heartbeat
    assert fleet.models() == {"A": 2, "B": 2}
    assert fleet.view(1.0)["models"] == {"A": ["h1:1", "h2:1"], "B": ["h2:1", "h3:1"]}


def test_eviction_after_the_window_only():
    fleet = Fleet(3.0)
    fleet.register(body("h1:1"), None, 0.0)
    fleet.register(body("h2:1"), None, 0.0)
    fleet.heartbeat(body("h2:1"), None, 2.5)
    assert fleet.evict(3.0) == []
    assert [i.id for i in fleet.evict(3.01)] == ["h1:1"]
    assert [i.id for i in fleet.evict(5.6)] == ["h2:1"]
    assert fleet.models() == {}


def test_a_pause_of_the_router_is_not_silence_of_its_instances():
    fleet = Fleet(3.0, tick_s=0.25)
    fleet.register(body("h1:1"), None, 0.0)
    fleet.register(body("h2:1"), None, 0.0)
    assert fleet.evict(0.25) == [] and fleet.evict(0.5) == []
    fleet.heartbeat(body("h2:1"), None, 0.6)
    assert fleet.evict(10.5) == []  # the router was away 10 s: no one's heartbeat could be read
    assert fleet.silence(fleet.instances["h1:1"], 10.5) == pytest.approx(0.75)
    fleet.heartbeat(body("h1:1"), None, 10.6)  # it was waiting in the router's socket
    evicted = {i.id: t for t in [10.5 + 0.25 * k for k in range(1, 20)] for i in fleet.evict(t)}
    # h2: 0.15 s watched before the pause, then 3 s more; h1: 3 s after its late heartbeat
    assert evicted == {"h2:1": 13.5, "h1:1": 13.75}


def test_a_router_that_ticks_on_time_counts_every_second():
    fleet = Fleet(3.0, tick_s=0.25)
    fleet.register(body("h1:1"), None, 0.0)
    evicted = {i.id: t for t in [0.25 * k for k in range(1, 20)] for i in fleet.evict(t)}
    assert evicted == {"h1:1": 3.25} and fleet.paused_s == 0.0


def test_deregister_drains_and_register_undoes_it():
    fleet = Fleet(3.0)
    fleet.register(body("h1:1"), None, 0.0)
    assert fleet.deregister({"instance": "h1:1"}).draining
    fleet.heartbeat(body("h1:1"), None, 1.0)
    assert fleet.instances["h1:1"].draining and fleet.models() == {}
    fleet.register(body("h1:1"), None, 2.0)
    assert fleet.models() == {"A": 1}
    with pytest.raises(FleetError) as e:
        fleet.deregister({"instance": "nobody:1"})
    assert e.value.status == 404


def test_the_address_defaults_to_the_callers_ip():
    fleet = Fleet(3.0)
    inst = fleet.register({"instance": "box:9000", "port": 9000, "models": ["A"]}, "10.1.2.3", 0.0)
    assert inst.address == "10.1.2.3:9000"
    inst = fleet.register({"instance": "box6:9000", "port": 9000, "models": ["A"]}, "fe80::1", 0.0)
    assert inst.address == "[fe80::1]:9000"


@pytest.mark.parametrize("bad", [
    [], {"models": ["A"], "address": "h:1"}, body(iid="has space:1"), body(models=()), body(models=(7,)),
    body(models=["A"] * 17), {**body(), "address": "nohost"}, {**body(), "address": "h:99999"},
    body(load={"in_flight": -1}), body(load={"queued": "3"}), body(load={"kv_pressure": 1.5}),
    body(load={"pressure": "HOT"}), body(load=[1]), body(load={"in_flight": True}),
    body(load={"in_flight": float("nan")}),
])
def test_bad_bodies_are_refused_and_change_nothing(bad):
    fleet = Fleet(3.0)
    with pytest.raises(FleetError):
        fleet.register(bad, None, 0.0)
    assert fleet.instances == {}


def test_weight_falls_with_queue_and_kv_pressure():
    fleet = Fleet(3.0)
    idle = fleet.register(body("h1:1", load={"queued": 0, "kv_pressure": 0.0}), None, 0.0)
    busy = fleet.register(body("h2:1", load={"queued": 3, "kv_pressure": 0.5}), None, 0.0)
    full = fleet.register(body("h3:1", load={"queued": 0, "kv_pressure": 1.0}), None, 0.0)
    assert weight_of(idle) == 100 and weight_of(busy) == round(100 * 0.5 / 4) and weight_of(full) == 1
