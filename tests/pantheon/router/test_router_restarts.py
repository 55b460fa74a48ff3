"""The router survives its own churn: HAProxy crashes, router restarts, edge keys held by the proxy."""

import json
import os
import signal
import socket
import time

import pytest

from tests.pantheon.router.fleet_kit import Router, instance, require_haproxy
from tests.workers.chaos_kit import counting_model

KEY = "edge-key-1"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    require_haproxy()
    return counting_model(tmp_path_factory)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(router, key=KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return router.request("POST", "/v1/completions", {"model": "C", "prompt": [40], "max_tokens": 3,
                                                      "temperature": 0}, headers=headers)


def until_ok(router, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status, body, _ = generate(router)
            if status == 200:
                return json.loads(body)
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("the router never served again:\n" + router.log())


@pytest.fixture(scope="module")
def setup(model, tmp_path_factory):
    port = free_port()
    state = tmp_path_factory.mktemp("router-state")  # a SIGKILLed router cannot clean its temp dir
    args = ["--heartbeat", "0.5", "--evict-after", "2", "--api-key", KEY, "--state-dir", str(state)]
    router = Router(args, port=port)
    server = None
    try:
        server = instance(model, "C", router.url, "cpu0")
        router.await_fleet(lambda f: "C" in f["models"])
        yield router, server, args, port
    finally:
        if server is not None:
            server.kill_tree()
        router.stop()


def test_edge_keys_are_enforced_by_the_proxy(setup):
    router, *_ = setup
    status, body, headers = generate(router, key=None)
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    assert headers.get("www-authenticate") == "Bearer"
    assert generate(router, key="wrong")[0] == 401
    status, body, _ = generate(router)
    assert status == 200 and json.loads(body)["choices"][0]["text"]
    assert router.request("GET", "/health")[0] == 200  # no key needed
    for path in ("/v1/models", "/v1/models?limit=20"):  # Anthropic's client may page with a query
        status, body, _ = router.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["C"], body
    status, body, _ = router.request("GET", "/v1/models/C", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and json.loads(body)["id"] == "C"
    status, body, _ = router.request("GET", "/v1/models/org%2Fnone", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"
    assert router.request("GET", "/v1/models/C")[0] == 401
    assert router.request("GET", "/v1/health")[0] == 200  # llama-server's alias, public too


def test_a_crashed_haproxy_is_restarted_and_reprogrammed(setup):
    router, *_ = setup
    before = router.haproxy_pid()
    os.kill(before, signal.SIGKILL)
    assert until_ok(router)["choices"][0]["text"]
    assert router.haproxy_pid() != before
    assert router.fleet()["haproxy"]["restarts"] == 1


def test_a_restarted_router_rebuilds_its_fleet_from_heartbeats(setup):
    router, server, args, port = setup
    proxy = router.haproxy_pid()
    router.proc.send_signal(signal.SIGKILL)
    router.proc.wait()
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{proxy}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{proxy}"), "haproxy outlived its router"
    router.__init__(args, port=port)  # the same address: instances keep heartbeating to it
    fleet = router.await_fleet(lambda f: "C" in f["models"], timeout=10)
    assert [i["instance"] for i in fleet["instances"]] == [server.url.split("//")[1]]
    assert until_ok(router)["choices"][0]["text"]
