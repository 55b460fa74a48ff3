"""`pantheon router` flags, the registry settings of pantheon-serve, and the haproxy.cfg they produce."""

import shutil
import subprocess

import pytest

from pantheon.errors import UsageError
from pantheon.router.config import RouterConfig, parse_router_args
from pantheon.router.haproxy_conf import Paths, render, write_files
from pantheon.serve.settings import parse_serve_args


def test_router_flags_and_the_shared_token_env():
    c = parse_router_args(["--port", "9000", "--api-key", "k1", "--heartbeat", "0.5", "--evict-after", "2"],
                          environ={"PANTHEON_REGISTRY_TOKEN": "t0k"})
    assert (c.port, c.api_keys, c.heartbeat_s, c.evict_after_s, c.token) == (9000, ("k1",), 0.5, 2.0, "t0k")
    assert parse_router_args(["--registry-token", "flag"], environ={"PANTHEON_REGISTRY_TOKEN": "env"}).token == "flag"


@pytest.mark.parametrize("argv", [["--heartbeat", "5", "--evict-after", "4"], ["--max-models", "0"],
                                  ["--port", "70000"], ["--api-key", "has space"], ["--host", "example.com"]])
def test_bad_router_flags_are_usage_errors(argv):
    with pytest.raises(UsageError):
        parse_router_args(argv, environ={})


def test_serve_registry_flags_and_env():
    c = parse_serve_args(["--registry", "http://10.0.0.5:8000/", "--advertise", "10.0.0.7:8080"],
                         environ={"PANTHEON_REGISTRY_TOKEN": "tok"})
    assert (c.registry.url, c.registry.token, c.registry.advertise) == ("http://10.0.0.5:8000", "tok", "10.0.0.7:8080")
    c = parse_serve_args([], environ={"PANTHEON_REGISTRY_URL": "http://r:1"})
    assert c.registry.url == "http://r:1" and c.registry.token is None
    assert parse_serve_args([], environ={}).registry is None


@pytest.mark.parametrize("argv", [["--registry", "https://r:1"], ["--registry", "http://r:1/path"],
                                  ["--registry", "r:1"], ["--advertise", "h:1"],
                                  ["--registry", "http://r:1", "--advertise", "nohost"]])
def test_bad_serve_registry_flags(argv):
    with pytest.raises(UsageError):
        parse_serve_args(argv, environ={})


def test_haproxy_accepts_the_generated_config(tmp_path):
    haproxy = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
    if haproxy is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    config = RouterConfig(port=18999, control_port=18998, api_keys=("key-1",), max_models=3)
    paths = Paths(str(tmp_path))
    write_files(config, paths)
    check = subprocess.run([haproxy, "-c", "-f", paths.config], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr + check.stdout
    text = render(config, paths)
    for needed in ("option http-buffer-request", "json_query('$.model')", "balance leastconn",
                   "stick on req.hdr(x-session-id)", "option httpchk GET /health", "retry-on conn-failure",
                   "backend m2", f"-f {paths.keys}", "lua-load-per-thread", "stream_guard.lua",
                   "filter lua.pantheon-stream-guard", "http-request set-header X-Pantheon-Stream-End close"):
        assert needed in text
    assert open(paths.keys).read() == "Bearer key-1\n"


def test_the_router_imports_no_model_code():
    """pantheon/router may import the standard library, pantheon.errors and pantheon.serve's numba-free flag and
    environment parsers only."""
    import ast
    import pathlib
    import sys

    allowed = ("pantheon.errors", "pantheon.serve.settings", "pantheon.serve.flag_values",
               "pantheon.serve.environment", "pantheon.router")
    for path in (pathlib.Path(__file__).resolve().parents[3] / "pantheon" / "router").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                top = name.split(".")[0]
                ok = name.startswith(allowed) or (top != "pantheon" and top in sys.stdlib_module_names)
                assert ok, f"{path.name} imports {name}"


def test_an_old_or_missing_haproxy_is_refused_by_name(tmp_path):
    from pantheon.router.proxy_process import ProxyStartError, check_version

    old = tmp_path / "haproxy"
    old.write_text("#!/bin/sh\necho 'HA-Proxy version 2.4.22-0ubuntu0.22.04.1 2023/08/14'\n")
    old.chmod(0o755)
    with pytest.raises(ProxyStartError, match="is 2.4; `pantheon router` needs HAProxy 2.6"):
        check_version(str(old))
    with pytest.raises(ProxyStartError, match="install HAProxy 2.6"):
        check_version(str(tmp_path / "absent"))
    no_lua = tmp_path / "haproxy-nolua"
    no_lua.write_text("#!/bin/sh\necho 'HAProxy version 2.6.12-1 2023/03/10'\necho '  OPTIONS = USE_PCRE2=1'\n")
    no_lua.chmod(0o755)
    with pytest.raises(ProxyStartError, match="built without Lua"):
        check_version(str(no_lua))


def test_importing_the_router_loads_no_engine():
    import subprocess
    import sys

    code = ("import sys, pantheon.router.main; print([m for m in sys.modules if m.split('.')[0] in "
            "('numba', 'numpy', 'workers', 'ipc') or m.startswith(('pantheon.engine', 'pantheon.text'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
