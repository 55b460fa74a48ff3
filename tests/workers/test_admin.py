"""The admin API, memory pressure, auth and models-dir confinement against a live pantheon-serve."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import shared_path
from tests.workers.serving import ROOT, Server

pytestmark = pytest.mark.usefixtures("compiled_kernels")  # its servers run models under timeouts

GIB = 1 << 30
TOKEN = "admin-secret-1"
KEY = "user-key-1"


def write_pressure(path, available, total=24 * GIB):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{available} {total}\n")
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for name in ("llama-q8_0", "qwen2-q8_0", "llama-q4_0"):
        shutil.copy(shared_path("golden", f"{name}.gguf"), root / f"{name}.gguf")
    (root / "notes.txt").write_text("not a model\n")
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy(shared_path("golden", "llama-f32.gguf"), outside / "secret.gguf")
    os.symlink(outside / "secret.gguf", root / "escape.gguf")
    return root


@pytest.fixture(scope="module")
def server(models_dir, tmp_path_factory):
    pressure = tmp_path_factory.mktemp("pressure") / "ram"
    write_pressure(pressure, 20 * GIB)
    srv = Server(["--cpu-dies", "2", "--models-dir", str(models_dir), "--admin-token", TOKEN, "--api-key", KEY,
                  "--model", str(models_dir / "llama-q8_0.gguf"), "--name", "base", "--dies", "cpu0"],
                 env={"PANTHEON_PRESSURE_FILE": str(pressure)})
    srv.pressure = pressure
    yield srv
    assert srv.stop() == 0


ADMIN = {"Authorization": f"Bearer {TOKEN}"}
USER = {"Authorization": f"Bearer {KEY}"}


def admin(server, method, path, body=None, headers=ADMIN):
    status, raw, hdrs = server.request(method, path, body, headers=headers, timeout=120)
    return status, json.loads(raw) if raw else None, hdrs


def names(server):
    return sorted(m["name"] for m in admin(server, "GET", "/admin/models")[1]["models"])


def test_list_and_dies(server):
    status, body, _ = admin(server, "GET", "/admin/models")
    assert status == 200 and [m["name"] for m in body["models"]] == ["base"]
    assert body["models"][0]["state"] == "loaded" and body["models"][0]["dies"] == ["cpu0"]
    status, body, _ = admin(server, "GET", "/admin/dies")
    assert status == 200 and [d["name"] for d in body["dies"]] == ["cpu0", "cpu1"]
    assert body["dies"][0]["state"] == "up" and body["dies"][0]["models"] == ["base"]
    assert body["dies"][1]["state"] == "down" and body["pressure"]["level"] == "OK"


def test_load_serve_unload(server):
    status, body, _ = admin(server, "POST", "/admin/models/load", {"path": "qwen2-q8_0.gguf", "name": "extra",
                                                                  "dies": ["cpu1"]})
    assert status == 200 and body["model"]["state"] == "loaded", body
    status, raw, _ = server.request("POST", "/v1/completions", {"model": "extra", "prompt": "hi", "max_tokens": 3},
                                    headers=USER)
    assert status == 200 and json.loads(raw)["model"] == "extra"
    status, body, _ = admin(server, "POST", "/admin/models/unload", {"name": "extra"})
    assert status == 200 and body["aborted"] == 0
    assert names(server) == ["base"]
    status, raw, _ = server.request("GET", "/v1/models", headers=USER)
    assert [m["id"] for m in json.loads(raw)["data"]] == ["base"]


def test_load_reports_progress_when_streamed(server):
    status, raw, headers = server.request("POST", "/admin/models/load",
                                          {"path": "llama-q4_0.gguf", "name": "streamed", "stream": True},
                                          headers=ADMIN, timeout=120)
    events = [json.loads(line[6:]) for line in raw.decode().splitlines()
              if line.startswith("data: {")]
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert events[0]["state"] == "loading" and events[-1]["model"]["state"] == "loaded"
    assert events[-1]["model"]["memory"]["weights"] > 0
    assert admin(server, "POST", "/admin/models/unload", {"name": "streamed"})[0] == 200


@pytest.mark.parametrize("body,status,code", [
    ({"path": "missing.gguf"}, 400, "invalid_path"),
    ({"path": "notes.txt"}, 400, "invalid_model"),
    ({"path": "../outside/secret.gguf"}, 400, "path_outside_models_dir"),
    ({"path": "/etc/hostname"}, 400, "path_outside_models_dir"),
    ({"path": "escape.gguf"}, 400, "path_outside_models_dir"),
    ({"path": "llama-q4_0.gguf", "name": "base"}, 409, "name_exists"),
    ({"path": "llama-q4_0.gguf", "dies": ["cpu7"]}, 400, "invalid_value"),
    ({"path": 7}, 400, "invalid_type"),
    ({"name": "x"}, 400, "missing_field"),
])
def test_load_refusals_change_nothing(server, body, status, code):
    before = names(server)
    got, reply, _ = admin(server, "POST", "/admin/models/load", body)
    assert got == status and reply["error"]["code"] == code, reply
    assert names(server) == before


def test_load_that_does_not_fit_is_refused_with_numbers(server):
    write_pressure(server.pressure, 1 << 20)  # 1 MiB "available"
    try:
        status, reply, _ = admin(server, "POST", "/admin/models/load", {"path": "llama-q4_0.gguf", "name": "big"})
    finally:
        write_pressure(server.pressure, 20 * GIB)
    assert status == 409 and reply["error"]["code"] == "does_not_fit"
    assert reply["error"]["estimate"]["total"] > reply["error"]["estimate"]["available"]
    assert names(server) == ["base"]
    wait_level(server, "OK")


def test_unknown_unload(server):
    status, reply, _ = admin(server, "POST", "/admin/models/unload", {"name": "nope"})
    assert status == 404 and reply["error"]["code"] == "model_not_found"


def test_busy_unload_ends_running_requests_with_a_clear_error(server):
    status, loaded, _ = admin(server, "POST", "/admin/models/load", {"path": "llama-q4_0.gguf", "name": "busy",
                                                                      "dies": ["cpu1"]})
    assert status == 200, loaded
    out = {}

    def long_request():
        out["reply"] = server.request("POST", "/v1/completions", {
            "model": "busy", "prompt": "x", "max_tokens": 1900, "logit_bias": {"2": -100}}, headers=USER)

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)
    status, body, _ = admin(server, "POST", "/admin/models/unload", {"name": "busy", "timeout": 0})
    t.join()
    assert status == 200 and body["aborted"] == 1, (body, out["reply"][1])
    code, raw, _ = out["reply"]
    assert code >= 500 and "unloaded" in json.loads(raw)["error"]["message"]


def wait_level(server, level, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if admin(server, "GET", "/admin/dies")[1]["pressure"]["level"] == level:
            return
        time.sleep(0.1)
    raise AssertionError(f"pressure never reached {level}")


def test_pressure_levels_gate_new_turns(server):
    chat = {"model": "base", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for available, level in ((5 * GIB, "WATCH"), (3 * GIB, "TIGHT"), (GIB, "CRITICAL")):
        write_pressure(server.pressure, available)
        wait_level(server, level)
        if level != "CRITICAL":
            assert server.request("POST", "/v1/chat/completions", chat, headers=USER)[0] == 200
    status, raw, headers = server.request("POST", "/v1/chat/completions", chat, headers=USER)
    assert status == 503 and int(headers["Retry-After"]) >= 1 and "CRITICAL" in json.loads(raw)["error"]["message"]
    status, reply, _ = admin(server, "POST", "/admin/models/load", {"path": "qwen2-q8_0.gguf", "name": "late"})
    assert status == 503 and reply["error"]["code"] == "memory_pressure", reply
    health = json.loads(server.get("/health")[1])
    assert health["pressure"] == "CRITICAL", health
    assert "pantheon_memory_pressure 3" in server.request("GET", "/metrics", headers=USER)[1].decode()
    write_pressure(server.pressure, 20 * GIB)
    wait_level(server, "OK")
    assert server.request("POST", "/v1/chat/completions", chat, headers=USER)[0] == 200


def test_tight_pressure_drops_kept_prefixes_and_serving_goes_on(server):
    prompt = ("Under memory pressure the workers drop the key and value caches that finished requests left "
              "behind, and the next request computes its whole prompt again")
    body = {"model": "base", "prompt": prompt, "max_tokens": 3, "temperature": 0}

    def ask():
        status, raw, _ = server.request("POST", "/v1/completions", body, headers=USER)
        assert status == 200, raw
        reply = json.loads(raw)
        return reply["usage"]["prompt_tokens_details"]["cached_tokens"], reply["choices"][0]["text"]

    first = ask()
    again = ask()
    assert again[0] > 0 and again[1] == first[1]
    write_pressure(server.pressure, 3 * GIB)
    wait_level(server, "TIGHT")
    time.sleep(1.0)  # the FREE_CACHES notice travels supervisor -> dispatcher -> die
    assert ask() == (0, first[1])  # dropped, computed again, the same greedy reply
    assert ask()[0] > 0  # and kept again: TIGHT drops what is idle once, it does not stop caching
    write_pressure(server.pressure, 20 * GIB)
    wait_level(server, "OK")


@pytest.mark.parametrize("path,method", [("/admin/models", "GET"), ("/admin/dies", "GET"),
                                         ("/admin/models/load", "POST"), ("/admin/models/unload", "POST")])
def test_admin_routes_need_the_admin_token(server, path, method):
    for headers in ({}, {"Authorization": "Bearer wrong"}, USER):
        status, reply, _ = admin(server, method, path, {}, headers=headers)
        assert status == 401 and reply["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("path,method", [("/v1/models", "GET"), ("/v1/completions", "POST"),
                                         ("/v1/chat/completions", "POST"), ("/tokenize", "POST")])
def test_api_routes_need_an_api_key(server, path, method):
    for headers in ({}, {"Authorization": "Bearer wrong"}, ADMIN):
        status, raw, _ = server.request(method, path, {"model": "base", "prompt": "x"}, headers=headers)
        assert status == 401 and json.loads(raw)["error"]["type"] == "authentication_error"
    assert server.get("/health")[0] == 200


def ctl(server, *args):
    out = subprocess.run([sys.executable, str(ROOT / "bin" / "pantheon-ctl"), "--url", server.url,
                          "--token", TOKEN, *args], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr


def test_pantheon_ctl_against_the_live_server(server):
    code, out, _ = ctl(server, "list")
    assert code == 0 and "base" in out and "loaded" in out
    code, out, _ = ctl(server, "--json", "dies")
    assert code == 0 and [d["name"] for d in json.loads(out)["dies"]] == ["cpu0", "cpu1"]
    code, out, err = ctl(server, "load", "llama-q4_0.gguf", "--name", "viactl", "--dies", "cpu1")
    assert code == 0, err
    code, out, _ = ctl(server, "--json", "list")
    assert "viactl" in [m["name"] for m in json.loads(out)["models"]]
    code, out, err = ctl(server, "load", "missing.gguf")
    assert code == 3 and "invalid_path" in err
    code, out, _ = ctl(server, "unload", "viactl")
    assert code == 0
    code, out, _ = ctl(server, "health")
    assert code == 0 and "base" in out


def test_pantheon_ctl_load_pooling_reaches_the_die(server):
    code, out, err = ctl(server, "load", "qwen2-q8_0.gguf", "--name", "pertoken", "--dies", "cpu1",
                         "--pooling", "none", "--max-sessions", "4")
    assert code == 0, err
    try:
        status, raw, _ = server.request("POST", "/embedding", {"model": "pertoken", "content": [5, 6, 7]},
                                        headers=USER, timeout=120)
        assert status == 200, raw
        rows = json.loads(raw)[0]["embedding"]
        assert len(rows) == 3 and len({len(r) for r in rows}) == 1  # one vector per token: pooling none
        code, out, err = ctl(server, "load", "qwen2-q8_0.gguf", "--name", "other", "--pooling", "sum")
        assert code == 2 and "--pooling" in err
    finally:
        assert ctl(server, "unload", "pertoken")[0] == 0


def test_admin_disabled_on_a_public_bind_without_a_token():
    srv = Server(["--host", "0.0.0.0", "--model", str(shared_path("golden", "llama-q8_0.gguf"))])
    try:
        srv.url = srv.url.replace("0.0.0.0", "127.0.0.1")
        status, raw, _ = srv.request("GET", "/admin/models")
        assert status == 403 and json.loads(raw)["error"]["code"] == "admin_disabled"
    finally:
        srv.stop()


def test_deploy_script_brings_up_a_fleet(server, models_dir, tmp_path):
    fleet = tmp_path / "fleet.txt"
    fleet.write_text("# name path dies ctx slots\n"
                     f"one {models_dir / 'llama-q4_0.gguf'} cpu1 512 2\n\n"
                     f"two {models_dir / 'qwen2-q8_0.gguf'} cpu1\n")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    out = subprocess.run(["bash", str(ROOT / "examples" / "deploy.sh"), str(fleet), "--token-file", str(token)],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PANTHEON_URL": server.url})
    assert out.returncode == 0, out.stdout + out.stderr
    assert {"one", "two"} <= set(names(server))
    for name in ("one", "two"):
        assert admin(server, "POST", "/admin/models/unload", {"name": name})[0] == 200


def test_startup_models_pass_the_same_admission(tmp_path):
    pressure = tmp_path / "ram"
    write_pressure(pressure, 1 << 20)
    out = subprocess.run([sys.executable, str(ROOT / "bin" / "pantheon-serve"), "--port", "0",
                          "--model", str(shared_path("golden", "llama-q8_0.gguf"))],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PANTHEON_PRESSURE_FILE": str(pressure)})
    assert out.returncode == 2
    assert "cannot be admitted" in out.stderr and "DOES-NOT-FIT" in out.stderr
