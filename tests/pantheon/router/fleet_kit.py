"""Tools of the router tests: a `pantheon router` process, instances registered with it, request helpers."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from tests.workers.serving import Launched, Server

ROOT = pathlib.Path(__file__).resolve().parents[3]


def require_haproxy():
    """The haproxy binary, or skip (CI installs Debian's package; see .ci/run)."""
    path = shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy") and "/usr/sbin/haproxy")
    if not path:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    return path


class Router(Launched):
    """A `bin/pantheon router` process on a free port; `stop()` sends SIGTERM and waits."""

    def __init__(self, args=(), port=0, env=None):
        super().__init__([sys.executable, str(ROOT / "bin" / "pantheon"), "router", "--port", str(port),
                          "--haproxy", require_haproxy(), *args], 30, env)

    def fleet(self, token=None):
        status, body, _ = self.request("GET", "/registry/fleet",
                                       headers={"Authorization": f"Bearer {token}"} if token else None)
        assert status == 200, body
        return json.loads(body)

    def instance_of(self, headers, fleet=None):
        """The instance id that answered, from HAProxy's X-Pantheon-Instance (server name) header."""
        server = headers.get("X-Pantheon-Instance") or headers.get("x-pantheon-instance")
        fleet = fleet or self.fleet()
        for key, s in fleet["servers"].items():
            if s["server"] == server:
                return key.split("@", 1)[1]
        raise AssertionError(f"server {server!r} not in the fleet {fleet['servers']}")

    def await_fleet(self, predicate, timeout=60, token=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fleet = self.fleet(token)
            if predicate(fleet):
                return fleet
            time.sleep(0.05)
        raise AssertionError(f"fleet never reached the expected state: {self.fleet(token)}\n{self.log()}")

    def haproxy_pid(self):
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid), "haproxy"], capture_output=True, text=True)
        return int(out.stdout.split()[0])



def instance(model_path, name, router_url, die, env=None, extra=()):
    """A pantheon-serve with one model on one of two small CPU dies, registered with the router."""
    return Server(["--cpu-dies", "2", "--http-workers", "1", "--model", model_path, "--name", name,
                   "--dies", die, "--registry", router_url, *extra], env=env)


def address_of(server):
    return server.url.split("//", 1)[1]
