"""Bring HAProxy's servers, weights and model map in line with the fleet, through the runtime API only."""

import sys
from dataclasses import dataclass

from pantheon.router.haproxy_conf import model_backend
from pantheon.router.runtime_api import ProxyError

FIRST_SERVER_ID = 1000
MAX_WEIGHT = 100


def log(msg):
    print(f"pantheon router: {msg}", file=sys.stderr, flush=True)


@dataclass
class Server:
    """One (model, instance) pair as a dynamic HAProxy server."""

    backend: str
    name: str
    address: str
    weight: int
    # ready | draining (the instance deregistered: its sessions finish) | retired (a live instance dropped
    # the model: its sessions finish while it lives) | removing (the instance is gone)
    state: str = "ready"


def weight_of(inst):
    """Fewer new connections to an instance with a queue or with its KV memory filling up (1..100)."""
    free = 1.0 - min(1.0, float(inst.load["kv_pressure"]))
    return max(1, min(MAX_WEIGHT, round(MAX_WEIGHT * free / (1 + inst.load["queued"]))))


class Programmer:
    """What the router has told HAProxy. `reset()` after HAProxy restarts; `reconcile(fleet)` on every change."""

    def __init__(self, api, map_path, max_models, check_inter_s):
        self.api, self.map_path, self.max_models = api, map_path, max_models
        self.check = f"check inter {max(100, int(check_inter_s * 1000))}ms fall 2 rise 1"
        self.next_id = FIRST_SERVER_ID
        self.reset()

    def reset(self):
        self.backends = {}   # model -> backend name
        self.mapped = set()  # models present in the runtime map
        self.servers = {}    # (model, instance id) -> Server

    def reconcile(self, fleet):
        """Add servers for new (model, instance) pairs, drain deregistered ones, retire the models a live
        instance dropped, remove evicted ones, update weights, keep the model map to models with a ready
        server. Returns the errors met."""
        errors = []
        wanted = {(m, i.id): i for i in fleet.instances.values() for m in i.models}
        for key, inst in wanted.items():
            errors += self._guard(self._apply, key, inst)
        for key in [k for k in self.servers if k not in wanted]:
            alive = key[1] in fleet.instances
            errors += self._guard(self._retire if alive else self._remove, key)
        errors += self._guard(self._sync_map)
        for key in [k for k, s in self.servers.items() if s.state != "ready"]:
            errors += self._guard(self._try_delete, key)
        return errors

    def describe(self):
        return {f"{m}@{iid}": {"backend": s.backend, "server": s.name, "state": s.state, "weight": s.weight}
                for (m, iid), s in sorted(self.servers.items())}

    def _guard(self, fn, *args):
        try:
            fn(*args)
            return []
        except (ProxyError, OSError) as e:
            log(str(e))
            return [str(e)]

    def _apply(self, key, inst):
        srv = self.servers.get(key)
        if srv is not None and srv.address != inst.address:
            self._remove(key)
            srv = None
        if srv is None:
            if not inst.draining:
                self._add(key, inst)
            return
        if inst.draining and srv.state in ("ready", "retired"):
            self._drain(srv)
        elif not inst.draining and srv.state in ("draining", "retired"):
            self.api.checked(f"set server {srv.backend}/{srv.name} state ready")
            srv.state = "ready"
        weight = weight_of(inst)
        if srv.state == "ready" and weight != srv.weight:
            self.api.checked(f"set server {srv.backend}/{srv.name} weight {weight}")
            srv.weight = weight

    def _add(self, key, inst):
        backend = self._backend_for(key[0])
        sid, weight = self.next_id, weight_of(inst)
        self.next_id += 1
        name = f"i{sid}"
        self.api.checked(f"add server {backend}/{name} {inst.address} id {sid} weight {weight} {self.check}",
                         ok=("New server registered",))
        self.servers[key] = Server(backend, name, inst.address, weight)
        self.api.checked(f"enable health {backend}/{name}")
        self.api.checked(f"enable server {backend}/{name}")
        log(f"{key[0]}: added {inst.id} at {inst.address} as {backend}/{name}")

    def _drain(self, srv):
        """maint, not drain: a draining server would still take sticky sessions; maint sends every new
        request elsewhere (option redispatch) while the connections already open finish."""
        self.api.checked(f"set server {srv.backend}/{srv.name} state maint")
        srv.state = "draining"

    def _retire(self, key):
        """A live instance no longer lists the model (unloaded, or its dies are restarting): no new
        requests, but the ones it holds are its own to finish or to end with an error, as a worker's
        crash is; cutting them would undo its retries."""
        srv = self.servers[key]
        if srv.state == "ready":
            self.api.checked(f"set server {srv.backend}/{srv.name} state maint")
            srv.state = "retired"

    def _remove(self, key):
        """The instance is gone (evicted): stop its traffic now. A draining server stopped heartbeating
        on purpose: its open streams finish before it is deleted."""
        srv = self.servers[key]
        if srv.state in ("draining", "removing"):
            return
        self.api.checked(f"set server {srv.backend}/{srv.name} state maint")
        self.api.checked(f"shutdown sessions server {srv.backend}/{srv.name}")
        srv.state = "removing"

    def _try_delete(self, key):
        srv = self.servers[key]
        if self.api.sessions(srv.backend).get(srv.name, 0):
            return
        reply = self.api.command(f"del server {srv.backend}/{srv.name}").strip()
        if reply.startswith("Server deleted") or "No such server" in reply:
            del self.servers[key]
            log(f"{key[0]}: removed {key[1]} ({srv.backend}/{srv.name})")
            self._release_backend(key[0])

    def _release_backend(self, model):
        if any(m == model for m, _ in self.servers):
            return
        self.backends.pop(model, None)

    def _backend_for(self, model):
        if model not in self.backends:
            used = set(self.backends.values())
            free = [model_backend(i) for i in range(self.max_models) if model_backend(i) not in used]
            if not free:
                raise ProxyError(f"model {model!r}: all {self.max_models} model backends are in use (--max-models)")
            self.backends[model] = free[0]
        return self.backends[model]

    def _sync_map(self):
        ready = {m for (m, _), s in self.servers.items() if s.state == "ready"}
        for model in sorted(ready - self.mapped):
            self.api.checked(f"add map {self.map_path} {model} {self.backends[model]}")
            self.mapped.add(model)
        for model in sorted(self.mapped - ready):
            self.api.command(f"del map {self.map_path} {model}")
            self.mapped.discard(model)
