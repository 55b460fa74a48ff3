"""Crash recovery, one fault at a time: crash loop, bad model, hangs, a killed front, a killed supervisor."""

import http.client
import json
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from ipc import owned_entries
from tests.ggufcraft import rewrite
from tests.workers.serving import Server
from tests.workers.chaos_kit import (Oracle, all_up, counting_model, dies, fronts, gone,
                                     replicated_server, stream, tree, wait_for)

pytestmark = pytest.mark.usefixtures("compiled_kernels")  # its servers run models under timeouts


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return counting_model(tmp_path_factory)


@pytest.fixture(scope="module")
def oracle(model):
    return Oracle(model)


@pytest.fixture
def servers():
    made = []
    yield made
    for srv in made:
        srv.kill_tree()


def start(servers, model, **env):
    srv = replicated_server(model, env)
    servers.append(srv)
    assert wait_for(lambda: all_up(srv), 30), dies(srv)  # /health is 200 as soon as one replica is up
    # a die is up before its kernels are warm, and its heartbeat is judged only after that (worker.py)
    assert wait_for(lambda: srv.log().count("kernels ready") >= 2, 120), srv.log()[-2000:]
    return srv


def assert_serves(server, oracle, start_id=700, n=50):
    out = stream(server.url, start_id, n)
    assert out.ended_once() and out.status == 200 and out.text == oracle.text(start_id, n), out


def restarted(server, name, old_pid, timeout=120):
    # a replacement is up once its kernels are loaded from numba's cache: seconds, more on a busy machine
    return wait_for(lambda: (lambda d: d["pid"] not in (0, old_pid) and d["state"] == "up" and d)(
        dies(server)[name]), timeout)


def test_crash_loop_marks_the_die_failed_and_the_other_die_serves_on(servers, model, oracle):
    srv = start(servers, model, PANTHEON_RESTART_INTENSITY="2", PANTHEON_RESTART_PERIOD="60")
    other = dies(srv)["cpu1"]
    gaps = []
    for _ in range(2):
        pid = dies(srv)["cpu0"]["pid"]
        struck = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        assert restarted(srv, "cpu0", pid), dies(srv)["cpu0"]
        gaps.append(time.monotonic() - struck)
    os.kill(dies(srv)["cpu0"]["pid"], signal.SIGKILL)  # the third crash within the period: over the limit
    failed = wait_for(lambda: (lambda d: d["state"] == "failed" and d)(dies(srv)["cpu0"]), 10)
    assert failed and failed["restarts"] == 2 and failed["pid"] == 0, failed
    assert gaps[1] > gaps[0] and gaps[1] >= 1.0, f"no exponential backoff: {gaps}"
    time.sleep(3)
    assert dies(srv)["cpu0"]["state"] == "failed", "a FAILED die was restarted"
    healthy = dies(srv)["cpu1"]
    assert (healthy["pid"], healthy["restarts"], healthy["state"]) == (other["pid"], 0, "up"), healthy
    status, body = srv.get("/health")
    health = json.loads(body)
    assert status == 200 and health["dies"] == {"cpu0": "failed", "cpu1": "up"}, body
    assert health["models"]["count"]["state"] == "loaded" and health["models"]["count"]["replicas"] == 1, body
    assert_serves(srv, oracle)


def test_a_model_that_cannot_boot_fails_with_its_reason_not_a_crash_loop(servers, model, oracle, tmp_path):
    # the header passes admission; the worker finds the shape wrong when it maps the weights
    bad = rewrite(model, tmp_path / "broken.gguf", tensor_arrays={"output_norm.weight": np.ones(32, np.float32)})
    srv = Server(["--cpu-dies", "2", "--http-workers", "1", "--model", model, "--name", "count", "--dies", "cpu0",
                       "--model", str(bad), "--name", "broken", "--dies", "cpu1"], env={})
    servers.append(srv)
    failed = wait_for(lambda: (lambda d: d["state"] == "failed" and d)(dies(srv)["cpu1"]), 20)
    assert failed and failed["restarts"] == 0, dies(srv)
    time.sleep(2)
    assert dies(srv)["cpu1"]["restarts"] == 0 and dies(srv)["cpu1"]["state"] == "failed"
    models = json.loads(srv.get("/health")[1])["models"]
    assert models["broken"]["state"] == "failed" and "ShapeMismatch" in models["broken"]["reason"], models
    assert models["count"]["state"] == "loaded"
    assert_serves(srv, oracle)


def test_a_hung_worker_dumps_its_stack_on_sigabrt_and_is_replaced(servers, model, oracle):
    srv = start(servers, model, PANTHEON_HANG_TIMEOUT="2")
    pid = dies(srv)["cpu0"]["pid"]
    struck = time.monotonic()
    os.kill(pid, signal.SIGUSR2)  # chaos hook: the main thread sleeps inside a handler; the heartbeat stops
    assert wait_for(lambda: dies(srv)["cpu0"]["pid"] not in (0, pid), 15), dies(srv)["cpu0"]
    took = time.monotonic() - struck  # detected, aborted and respawned (its warm-up is not the detector's)
    assert restarted(srv, "cpu0", pid), dies(srv)["cpu0"]
    log = srv.log()
    assert f"(pid {pid}) missed its heartbeat" in log and "SIGABRT" in log
    dump = log[log.index("Fatal Python error: Aborted"):]
    assert "most recent call first" in dump and "worker.py" in dump, dump[:2000]
    assert f"(pid {pid}) exited with -6" in log  # faulthandler re-raised the SIGABRT
    assert 2 <= took < 10, took
    assert dies(srv)["cpu0"]["restarts"] == 1
    assert_serves(srv, oracle)


def test_a_worker_deaf_to_sigabrt_gets_sigkill(servers, model, oracle):
    srv = start(servers, model, PANTHEON_HANG_TIMEOUT="2")
    pid = dies(srv)["cpu1"]["pid"]
    os.kill(pid, signal.SIGSTOP)  # a stopped process cannot act on SIGABRT
    assert wait_for(lambda: f"(pid {pid}) missed its heartbeat" in srv.log(), 10)
    aborted = time.monotonic()
    assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    assert restarted(srv, "cpu1", pid), dies(srv)["cpu1"]
    assert time.monotonic() - aborted >= 1.5, "SIGKILL came without the grace after SIGABRT"
    assert f"(pid {pid}) exited with -9" in srv.log()
    assert_serves(srv, oracle)


def _open(server, start_id, n):
    conn = http.client.HTTPConnection(server.url.split("//")[1], timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({
        "model": "count", "prompt": [start_id], "max_tokens": n, "temperature": 0, "stream": True}),
        {"Content-Type": "application/json"})
    conn.local_port = conn.sock.getsockname()[1]
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.readline().startswith(b"data: "):
        pass
    return conn, resp


def _front_of(server, conn):
    """The front process holding the server side of our connection."""
    port = conn.local_port
    for pid in fronts(server):
        if any(c.raddr and c.raddr.port == port for c in psutil.Process(pid).net_connections("tcp")):
            return pid
    raise AssertionError("no front holds the connection")


def _in_flight(server):
    return sum(d["in_flight"] for d in dies(server).values())


def test_a_killed_front_is_respawned_and_its_requests_are_aborted(servers, model, oracle):
    srv = start(servers, model)
    t0 = time.monotonic()
    assert_serves(srv, oracle, 300, 300)
    full_s = (time.monotonic() - t0) * 3000 / 300
    before = fronts(srv)
    conn, resp = _open(srv, 400, 3000)
    victim = _front_of(srv, conn)
    assert _in_flight(srv) == 1
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    rest = b""
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        while True:
            line = resp.readline()
            if not line:
                raise ConnectionError("closed")
            rest += line
    assert b"[DONE]" not in rest
    assert wait_for(lambda: _in_flight(srv) == 0, full_s / 3), "the worker kept generating for a dead front"
    assert time.monotonic() - killed < full_s / 3
    now = wait_for(lambda: (lambda f: len(f) == len(before) and victim not in f and f)(fronts(srv)), 10)
    assert now and set(now) - set(before), (before, now)
    assert dies(srv)["cpu0"]["restarts"] == dies(srv)["cpu1"]["restarts"] == 0
    for k in range(4):  # new connections land on either front; all of them work
        assert_serves(srv, oracle, 900 + k, 30)


def test_a_killed_supervisor_takes_every_child_and_the_next_start_is_clean(servers, model, oracle):
    srv = start(servers, model)
    outs = []
    # As long as the counting model's context allows: under a loaded machine the kill can come a second
    # or more after both streams are seen in flight, and a faster engine finishes shorter ones first.
    clients = [threading.Thread(target=lambda s=s: outs.append(stream(srv.url, s, 4000))) for s in (30, 60)]
    for t in clients:
        t.start()
    assert wait_for(lambda: _in_flight(srv) == 2, 10)
    pids = [p.pid for p in tree(srv.proc.pid)]
    assert len(pids) == 5  # supervisor, two fronts, two workers
    killed_at = time.monotonic()
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait()
    assert gone(pids, 5), [p for p in pids if psutil.pid_exists(p)]
    for t in clients:
        t.join(30)
    assert len(outs) == 2, outs
    cut = [o for o in outs if o.ended > killed_at]  # a stream that ended first must have ended whole
    assert cut and all(o.broken and not o.dones for o in cut), outs
    assert all(o.ended_once() and o.text == oracle.text(o.start, o.n) for o in outs if o not in cut), outs
    assert owned_entries(srv.proc.pid) == []
    again = start(servers, model)
    assert wait_for(lambda: all_up(again), 20)
    assert_serves(again, oracle)
    assert again.stop() == 0 and owned_entries(again.proc.pid) == []


def _stream_in_thread(server, start_id, n, on_open=None, extra=None):
    box = {}
    thread = threading.Thread(target=lambda: box.update(out=stream(server.url, start_id, n, on_open=on_open,
                                                                   extra=extra)))
    thread.start()
    return thread, box


def test_a_stopped_worker_shows_stalled_and_its_stream_moves_within_seconds(servers, model, oracle):
    """SIGSTOP freezes a worker mid-stream (heartbeat and all): with the default hang timeout the die
    shows `stalled` in /health and the stream finishes on the other replica, unbroken and in order."""
    srv = start(servers, model)
    stopped = {}

    def freeze(out):
        stopped["pid"] = dies(srv)[out.replica]["pid"]
        stopped["at"] = time.monotonic()
        os.kill(stopped["pid"], signal.SIGSTOP)

    thread, box = _stream_in_thread(srv, 300, 400, on_open=freeze)
    assert wait_for(lambda: "pid" in stopped, 30)
    replica = next(name for name, d in dies(srv).items() if d["pid"] == stopped["pid"])
    stalled = wait_for(lambda: json.loads(srv.get("/health")[1])["dies"][replica] == "stalled", 15)
    assert stalled, srv.get("/health")
    thread.join(60)
    out = box["out"]
    assert out.ended_once() and out.text == oracle.text(300, 400), oracle.first_difference(out)
    assert out.ended - stopped["at"] < 20, out.ended - stopped["at"]
    assert restarted(srv, replica, stopped["pid"])


def test_poison_pill_a_request_at_two_worker_deaths_ends_with_an_error(servers, model, oracle):
    """Resubmitted after the first death, ended with an error event after the second: never a third try."""
    srv = start(servers, model)
    first = {}

    def kill_first(out):
        first["pid"] = dies(srv)[out.replica]["pid"]
        first["name"] = out.replica
        os.kill(first["pid"], signal.SIGKILL)

    thread, box = _stream_in_thread(srv, 500, 1800, on_open=kill_first)
    assert wait_for(lambda: "pid" in first, 30)
    other = next(name for name in dies(srv) if name != first["name"])
    moved = wait_for(lambda: (lambda d: d["in_flight"] > 0 and d)(dies(srv)[other]), 10, step=0.01)
    assert moved, dies(srv)
    os.kill(moved["pid"], signal.SIGKILL)
    _ends_with_one_error_then_serves(srv, oracle, thread, box, "poison-pill")


def _ends_with_one_error_then_serves(srv, oracle, thread, box, words):
    """The stream ended with one error event naming `words` and one [DONE]; the dies come back and serve."""
    thread.join(60)
    out = box["out"]
    assert out.status == 200 and len(out.errors) == 1 and out.dones == 1, out
    assert words in out.errors[0]["message"], out.errors
    assert wait_for(lambda: all_up(srv), 30), dies(srv)
    assert_serves(srv, oracle)


def test_a_worker_death_after_several_choices_started_continues_each_choice(servers, model, oracle):
    """n > 1 killed mid-stream: each started choice continues on the live replica as its own
    continuation; every choice ends once, whole, with no token twice and none missing."""
    srv = start(servers, model)
    killed = {}

    def kill(out):
        killed["pid"] = dies(srv)[out.replica]["pid"]
        os.kill(killed["pid"], signal.SIGKILL)

    thread, box = _stream_in_thread(srv, 900, 1500, on_open=kill, extra={"n": 2})
    thread.join(90)
    out = box["out"]
    assert out.status == 200 and not out.errors and out.dones == 1 and not out.broken, out
    assert [f for f in out.finishes if f] == ["length", "length"], out.finishes
    want = oracle.text(900, 1500)
    assert out.texts == {0: want, 1: want}, {i: t[:80] for i, t in out.texts.items()}
    assert f"(pid {killed['pid']}) exited with -9" in srv.log()
    assert wait_for(lambda: all_up(srv), 30), dies(srv)
    assert_serves(srv, oracle)


def test_unload_then_load_on_a_failed_die_serves_again(servers, model, oracle):
    srv = Server(["--cpu-dies", "2", "--http-workers", "1", "--model", model, "--name", "a", "--dies", "cpu0",
                  "--model", model, "--name", "b", "--dies", "cpu1"],
                 env={"PANTHEON_RESTART_INTENSITY": "1", "PANTHEON_RESTART_PERIOD": "60"})
    servers.append(srv)
    assert wait_for(lambda: all_up(srv), 30), dies(srv)
    for _ in range(2):
        pid = dies(srv)["cpu0"]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: dies(srv)["cpu0"]["pid"] not in (0, pid) or dies(srv)["cpu0"]["state"] == "failed", 15)
    assert wait_for(lambda: dies(srv)["cpu0"]["state"] == "failed", 15), dies(srv)
    status, raw, _ = srv.request("POST", "/admin/models/unload", {"name": "a"}, timeout=60)
    assert status == 200, raw
    started = time.monotonic()
    status, raw, _ = srv.request("POST", "/admin/models/load", {"path": model, "name": "a", "dies": ["cpu0"],
                                                                "timeout": 60}, timeout=90)
    assert status == 200 and json.loads(raw)["model"]["state"] == "loaded", raw
    assert time.monotonic() - started < 30 and dies(srv)["cpu0"]["state"] == "up"
    status, raw, _ = srv.request("POST", "/v1/completions", {"model": "a", "prompt": [5], "max_tokens": 3})
    assert status == 200, raw
