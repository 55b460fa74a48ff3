"""The programmer's runtime-API commands for fleet changes, against a recording stand-in for HAProxy."""

from pantheon.router.fleet import Fleet
from pantheon.router.programmer import Programmer


class RecordingApi:
    """Answers as HAProxy 2.6 does; `sessions` is what `show stat` would count per server."""

    def __init__(self):
        self.commands, self.sessions_by_server = [], {}

    def checked(self, line, ok=("",)):
        self.commands.append(line)
        return "New server registered." if line.startswith("add server") else ""

    def command(self, line):
        self.commands.append(line)
        return "Server deleted." if line.startswith("del server") else ""

    def sessions(self, backend):
        return dict(self.sessions_by_server)

    def take(self):
        out, self.commands = self.commands, []
        return out


def body(iid, models):
    return {"instance": iid, "address": iid, "models": list(models)}


def setup():
    api, fleet = RecordingApi(), Fleet(3.0)
    programmer = Programmer(api, "/state/models.map", max_models=4, check_inter_s=0.5)
    fleet.register(body("h1:1", ("A", "B")), None, 0.0)
    programmer.reconcile(fleet)
    return api, fleet, programmer


def test_new_models_get_a_server_and_a_map_entry():
    api, _, programmer = setup()
    commands = api.take()
    assert [c.split()[:3] for c in commands if c.startswith("add server")] == [
        ["add", "server", "m0/i1000"], ["add", "server", "m1/i1001"]]
    assert "add map /state/models.map A m0" in commands and "add map /state/models.map B m1" in commands
    assert {k: v["state"] for k, v in programmer.describe().items()} == {"A@h1:1": "ready", "B@h1:1": "ready"}


def test_a_model_a_live_instance_drops_is_retired_without_cutting_its_sessions():
    api, fleet, programmer = setup()
    api.take()
    api.sessions_by_server = {"i1001": 2}  # two requests for B still held by the instance
    fleet.heartbeat(body("h1:1", ("A",)), None, 0.5)  # B's only die restarts: B is not listed
    programmer.reconcile(fleet)
    commands = api.take()
    assert "set server m1/i1001 state maint" in commands
    assert not any(c.startswith("shutdown sessions") for c in commands), commands
    assert "del map /state/models.map B" in commands
    fleet.heartbeat(body("h1:1", ("A", "B")), None, 1.0)  # back before its sessions ended
    programmer.reconcile(fleet)
    assert "set server m1/i1001 state ready" in api.take()
    assert programmer.describe()["B@h1:1"]["state"] == "ready"


def test_a_retired_server_is_deleted_once_its_sessions_end():
    api, fleet, programmer = setup()
    fleet.heartbeat(body("h1:1", ("A",)), None, 0.5)
    api.sessions_by_server = {"i1001": 1}
    programmer.reconcile(fleet)
    assert "B@h1:1" in programmer.describe()
    api.sessions_by_server = {}
    programmer.reconcile(fleet)
    assert "del server m1/i1001" in api.take() and "B@h1:1" not in programmer.describe()


def test_an_evicted_instance_is_cut_even_where_a_model_was_retired():
    api, fleet, programmer = setup()
    fleet.heartbeat(body("h1:1", ("A",)), None, 0.5)
    api.sessions_by_server = {"i1000": 1, "i1001": 1}
    programmer.reconcile(fleet)
    api.take()
    assert [i.id for i in fleet.evict(4.0)] == ["h1:1"]
    programmer.reconcile(fleet)
    commands = api.take()
    assert "shutdown sessions server m0/i1000" in commands and "shutdown sessions server m1/i1001" in commands


def test_a_deregistered_instance_drains_and_is_never_cut():
    api, fleet, programmer = setup()
    api.sessions_by_server = {"i1000": 1, "i1001": 1}
    fleet.deregister({"instance": "h1:1"})
    programmer.reconcile(fleet)
    assert {v["state"] for v in programmer.describe().values()} == {"draining"}
    fleet.evict(4.0)  # it stops heartbeating on purpose
    programmer.reconcile(fleet)
    assert not any(c.startswith("shutdown sessions") for c in api.take())
