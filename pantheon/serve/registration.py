"""Register this instance's models with a `pantheon router`, heartbeat its load, deregister on drain.

Runs as a daemon thread in HTTP front 0 (never in the supervisor, which forks). The router's reply
sets the heartbeat interval. A heartbeat carries the whole registration, so a restarted router
learns this instance from the next heartbeat; an unreachable router is retried at the same pace.
"""

import json
import socket
import threading
import urllib.error
import urllib.request

DEFAULT_INTERVAL_S = 1.0
TIMEOUT_S = 2.0


class Registrar:
    """`snapshot()` -> {"models": [names], "load": {...}} or None while nothing is loaded yet."""

    def __init__(self, registry, bound, snapshot, log):
        self.registry, self.snapshot, self.log = registry, snapshot, log
        self.address, self.port = _address(registry.advertise, bound)
        self.instance = self.address or f"{socket.gethostname()}:{self.port}"
        self.interval = DEFAULT_INTERVAL_S
        self.registered = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="registrar", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def deregister(self):
        """Stop heartbeating and tell the router to drain this instance (best effort, bounded)."""
        self._stop.set()
        self._thread.join(TIMEOUT_S + 1)
        if self.registered:
            try:
                self._call("DELETE", "/registry/deregister", {"instance": self.instance})
                self.log(f"deregistered from {self.registry.url}")
            except (OSError, ValueError) as e:
                self.log(f"deregister at {self.registry.url} failed: {e}")

    def _loop(self):
        while not self._stop.is_set():
            try:
                self._beat()
            except Exception as e:  # noqa: BLE001 - a dead heartbeat thread gets the live instance evicted
                self.log(f"heartbeat skipped: {type(e).__name__}: {e}")
            self._stop.wait(self.interval)

    def _beat(self):
        snap = self.snapshot()
        if not snap or not snap["models"]:
            return
        body = {"instance": self.instance, **({"address": self.address} if self.address else {"port": self.port}),
                **snap}
        try:
            reply = self._call("POST", "/registry/heartbeat" if self.registered else "/registry/register", body)
        except (OSError, ValueError) as e:
            if self.registered:
                self.log(f"heartbeat to {self.registry.url} failed: {e}")
            self.registered = False
            return
        if not self.registered:
            self.log(f"registered {', '.join(snap['models'])} with {self.registry.url} as {self.instance}")
        self.registered = True
        self.interval = _interval(reply)

    def _call(self, method, path, body):
        headers = {"Content-Type": "application/json"}
        if self.registry.token:
            headers["Authorization"] = f"Bearer {self.registry.token}"
        req = urllib.request.Request(self.registry.url + path, data=json.dumps(body).encode(), method=method,
                                     headers=headers)
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return json.loads(r.read() or b"{}")


def _address(advertise, bound):
    """(address to advertise or None, port): --advertise, else the bound host:port unless it is a wildcard."""
    host, port = bound[0], bound[1]
    if advertise:
        return advertise, int(advertise.rpartition(":")[2])
    if host in ("0.0.0.0", "::", ""):
        return None, port  # the router takes the caller's IP
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), port


def _interval(reply):
    value = reply.get("heartbeat_interval_s") if isinstance(reply, dict) else None
    if isinstance(value, (int, float)) and 0.05 <= value <= 3600:
        return float(value)
    return DEFAULT_INTERVAL_S
