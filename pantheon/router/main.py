"""`pantheon router`: the Router (fleet + HAProxy programming) and its run loop."""

import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import replace

from pantheon.errors import PantheonError, UsageError
from pantheon.router.config import parse_router_args
from pantheon.router.control import ControlServer
from pantheon.router.fleet import Fleet
from pantheon.router.haproxy_conf import Paths, write_files
from pantheon.router.programmer import Programmer, log
from pantheon.router.proxy_process import ProxyProcess

CREATED = int(time.time())


class Router:
    """The fleet, what HAProxy was told, and the HAProxy process; one lock serialises all three."""

    def __init__(self, config, paths):
        self.config, self.paths = config, paths
        self.lock = threading.Lock()
        self.fleet = Fleet(config.evict_after_s, tick_interval(config))
        self.proxy = ProxyProcess(config.haproxy, paths, self._proxy_restarted, log)
        self.programmer = Programmer(self.proxy.api, paths.models_map, config.max_models, config.heartbeat_s)

    def _contract(self, inst):
        return {"instance": inst.id, "address": inst.address, "heartbeat_interval_s": self.config.heartbeat_s,
                "evict_after_s": self.config.evict_after_s}

    def register(self, body, peer):
        with self.lock:
            inst = self.fleet.register(body, peer, time.monotonic())
            log(f"registered {inst.id} at {inst.address}: {', '.join(inst.models)}")
            self.programmer.reconcile(self.fleet)
            return self._contract(inst)

    def heartbeat(self, body, peer):
        with self.lock:
            known = _instance_known(self.fleet, body)
            inst = self.fleet.heartbeat(body, peer, time.monotonic())
            if not known:
                log(f"{inst.id} joined by heartbeat at {inst.address}: {', '.join(inst.models)}")
            self.programmer.reconcile(self.fleet)
            return self._contract(inst)

    def deregister(self, body, peer):
        with self.lock:
            inst = self.fleet.deregister(body)
            log(f"{inst.id} deregistered: draining")
            self.programmer.reconcile(self.fleet)
            return {"instance": inst.id, "state": "draining"}

    def tick(self):
        """Evict instances whose heartbeats lapsed; finish drains; apply load changes."""
        with self.lock:
            for inst in self.fleet.evict(time.monotonic()):
                log(f"evicted {inst.id}: no heartbeat for over {self.config.evict_after_s:g} s")
            self.programmer.reconcile(self.fleet)

    def _proxy_restarted(self):
        with self.lock:
            self.programmer.reset()
            self.programmer.reconcile(self.fleet)

    def models_list(self):
        with self.lock:
            models = self.fleet.models()
        return {"object": "list", "data": [{"id": m, "object": "model", "created": CREATED, "owned_by": "pantheon",
                                            "meta": {"instances": n}} for m, n in models.items()]}

    def fleet_view(self):
        with self.lock:
            view = self.fleet.view(time.monotonic())
            view["servers"] = self.programmer.describe()
        view["haproxy"] = {"alive": self.proxy.alive, "restarts": self.proxy.restarts}
        return view

    def health(self):
        with self.lock:
            models = self.fleet.models()
        ok = self.proxy.alive
        return ok, {"status": "ok" if ok else "unavailable", "haproxy": "up" if ok else "down",
                    "instances": len(self.fleet.instances), "models": list(models)}


def tick_interval(config):
    """Seconds between the router's eviction checks: at least two per heartbeat interval."""
    return min(0.25, config.heartbeat_s / 2)


def _instance_known(fleet, body):
    return isinstance(body, dict) and body.get("instance") in fleet.instances


def _free_port(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve(config):
    """Start the control server and HAProxy, then evict and reconcile until SIGTERM/SIGINT."""
    own_dir = config.state_dir is None
    state_dir = tempfile.mkdtemp(prefix="pantheon-router-") if own_dir else config.state_dir
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    control = None
    try:
        router = Router(config, Paths(state_dir))
        control = ControlServer(config.control_port, router)
        port = config.port or _free_port(config.host)
        config = router.config = replace(config, port=port, control_port=control.server_address[1])
        write_files(config, router.paths)
        threading.Thread(target=control.serve_forever, name="control", daemon=True).start()
        router.proxy.start()
        log(f"listening on http://{config.host}:{port} (control plane on 127.0.0.1:{config.control_port})")
        while not stop.wait(tick_interval(config)):
            router.tick()
        return 0
    finally:
        if control is not None:
            control.shutdown()
            router.proxy.stop()
        if own_dir:
            shutil.rmtree(state_dir, ignore_errors=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        config = parse_router_args(argv)
        return serve(config)
    except UsageError as e:
        print(f"pantheon router: {e}", file=sys.stderr)
        return 2
    except (PantheonError, OSError) as e:
        print(f"pantheon router: {e}", file=sys.stderr)
        return 1
