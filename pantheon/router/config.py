"""The router's flags, parsed once into a frozen RouterConfig (its environment comes from pantheon.serve.settings)."""

import argparse
import os
from dataclasses import dataclass
from typing import Optional

from pantheon.errors import UsageError
from pantheon.serve.environment import registry_token_from_env
from pantheon.serve.flag_values import parse_host, parse_secret, read_key_file

DEFAULT_PORT = 8000
MAX_MODELS = 64


@dataclass(frozen=True)
class RouterConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    control_port: int = 0          # the control plane's own HTTP server, loopback only (0: a free port)
    token: Optional[str] = None    # shared registry token; None: the registry routes are open (loopback use)
    api_keys: tuple = ()           # edge keys HAProxy enforces on /v1/*; empty: no edge auth
    heartbeat_s: float = 1.0       # the interval instances are told to heartbeat at
    evict_after_s: float = 3.0     # an instance silent this long is evicted
    max_models: int = 16           # HAProxy backends pre-declared for models (backends are not dynamic in 2.6)
    max_body: int = 1 << 20        # bytes of request body HAProxy buffers to read `model`; larger: 413
    stream_timeout_s: float = 600.0  # longest silence from an instance (queueing before the first token)
    haproxy: str = "haproxy"
    state_dir: Optional[str] = None  # where haproxy.cfg, the socket and the maps live (default: a temp dir)


def _parser():
    p = argparse.ArgumentParser(prog="pantheon router", description=(
        "Control plane for many pantheon-serve instances behind HAProxy: instances register, heartbeat "
        "and are evicted; HAProxy routes each request by its `model` field, least-connections, sticky on "
        "X-Session-Id."))
    p.add_argument("--host", default="127.0.0.1", help="public bind address of the proxy")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="public port of the proxy (0: a free port)")
    p.add_argument("--control-port", type=int, default=0, help="loopback port of the control plane (0: free)")
    p.add_argument("--registry-token", metavar="TOKEN", help="shared token instances must present "
                   "(also PANTHEON_REGISTRY_TOKEN)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY", help="edge key; repeatable")
    p.add_argument("--api-key-file", metavar="PATH", help="edge keys, one a line, '#' comments")
    p.add_argument("--heartbeat", type=float, default=1.0, metavar="S", help="heartbeat interval told to instances")
    p.add_argument("--evict-after", type=float, default=3.0, metavar="S", help="evict an instance silent this long")
    p.add_argument("--max-models", type=int, default=16, metavar="N", help=f"distinct models (1..{MAX_MODELS})")
    p.add_argument("--max-body", type=int, default=1 << 20, metavar="BYTES", help="largest request body")
    p.add_argument("--stream-timeout", type=float, default=600.0, metavar="S", help="longest instance silence")
    p.add_argument("--haproxy", default="haproxy", metavar="PATH", help="the haproxy binary")
    p.add_argument("--state-dir", metavar="DIR", help="haproxy.cfg, socket and maps (default: a temp dir)")
    return p


def parse_router_args(argv, environ=os.environ):
    """RouterConfig from `pantheon router` arguments; argparse exits 2 on a malformed flag."""
    a = _parser().parse_args(argv)
    _check(0 <= a.port <= 65535 and 0 <= a.control_port <= 65535, "--port/--control-port: 0..65535")
    _check(0.05 <= a.heartbeat <= 3600, "--heartbeat: 0.05..3600 seconds")
    _check(a.heartbeat < a.evict_after <= 86400, "--evict-after: longer than --heartbeat, at most 86400")
    _check(1 <= a.max_models <= MAX_MODELS, f"--max-models: 1..{MAX_MODELS}")
    _check(1024 <= a.max_body <= 64 << 20, "--max-body: 1024..67108864 bytes")
    _check(1 <= a.stream_timeout <= 86400, "--stream-timeout: 1..86400 seconds")
    keys = [parse_secret("--api-key", k) for k in a.api_key]
    keys += read_key_file("--api-key-file", a.api_key_file) if a.api_key_file else []
    token = parse_secret("--registry-token", a.registry_token) if a.registry_token else registry_token_from_env(environ)
    return RouterConfig(parse_host("--host", a.host), a.port, a.control_port, token, tuple(dict.fromkeys(keys)),
                        a.heartbeat, a.evict_after, a.max_models, a.max_body, a.stream_timeout, a.haproxy,
                        a.state_dir)


def _check(ok, message):
    if not ok:
        raise UsageError(message)
