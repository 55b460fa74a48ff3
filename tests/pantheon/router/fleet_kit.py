"""Tools of the router tests: a `pantheon router` process, instances registered with it, request helpers."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

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

    def request(self, method, path, body=None, headers=None, timeout=60):
        return http_request(self.url, method, path, body, headers, timeout)

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

    def stop(self, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode


def http_request(base, method, path, body=None, headers=None, timeout=60):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def instance(model_path, name, router_url, die, env=None, extra=()):
    """A pantheon-serve with one model on one of two small CPU dies, registered with the router."""
    return Server(["--cpu-dies", "2", "--http-workers", "1", "--model", model_path, "--name", name,
                   "--dies", die, "--registry", router_url, *extra], env=env)


def address_of(server):
    return server.url.split("//", 1)[1]
