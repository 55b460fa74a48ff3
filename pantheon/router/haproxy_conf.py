"""haproxy.cfg for the router: one public frontend, the control plane's backend, one backend per model slot.

HAProxy 2.6 adds and removes servers at run time but not backends, so `max_models` model backends
(m0, m1, ...) are declared up front with no servers; the runtime map `models.map` says which model
name uses which backend, and the router fills both through the runtime API.
"""

import json
import os

from pantheon.serve.settings import RESPONSE_ID_HEADER, STREAM_END_HEADER

GUARD_LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_guard.lua")
SESSION_HEADER = "x-session-id"
INSTANCE_HEADER = "X-Pantheon-Instance"
PREVIOUS_RESPONSE = "req.body,json_query('$.previous_response_id')"
# which model backend stored a response: gpt0 = the backend's index + 1 (table_gpt0 gives 0 for a missing key)
RESPONSE_HOMES = "response_homes"
STORED_PATH = r"^/(v1/)?responses/resp_[^/]+(/input_items|/cancel)?$"
_HOME = f"table_gpt0({RESPONSE_HOMES})"
_STORED_ANSWER = f"{{ res.hdr({RESPONSE_ID_HEADER}) -m found }}"
REQUEST_ID_HEADER = "X-Request-Id"
# A client's id that the instances would keep too (pantheon.serve.http.request_id); others are replaced
SANE_REQUEST_ID = r"^[A-Za-z0-9._:/+=-]{1,128}$"


def error_body(status, message, kind, code):
    """An OpenAI-style error document as one line (HAProxy sends it verbatim)."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}},
                      separators=(",", ":"))


def _return(status, message, kind, code, cond, extra=""):
    body = error_body(status, message, kind, code)
    assert "'" not in body, "HAProxy's single-quoted strings cannot hold a quote"
    return f"    http-request return status {status} content-type application/json string '{body}'{extra} if {cond}"


class Paths:
    """Files of one router run, all inside its state directory."""

    def __init__(self, state_dir):
        self.dir = state_dir
        self.config = os.path.join(state_dir, "haproxy.cfg")
        self.socket = os.path.join(state_dir, "admin.sock")
        self.models_map = os.path.join(state_dir, "models.map")
        self.keys = os.path.join(state_dir, "keys.lst")


def model_backend(i):
    return f"m{i}"


def render(config, paths):
    """The whole haproxy.cfg text for `config` (a RouterConfig)."""
    parts = [_global(config, paths), _defaults(config), _frontend(config, paths), _control(config)]
    parts += [_model_backend(config, i) for i in range(config.max_models)]
    parts += [_no_model(), _response_homes()]
    return "\n".join(parts) + "\n"


def write_files(config, paths):
    """haproxy.cfg, an empty model map and the edge key list (mode 600)."""
    with open(paths.config, "w") as f:
        f.write(render(config, paths))
    open(paths.models_map, "w").close()
    fd = os.open(paths.keys, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"Bearer {k}\n" for k in config.api_keys)


def _bufsize(config):
    # the buffer must hold the whole body: `model` is read from it before a backend is chosen
    return config.max_body + 16384


def _global(config, paths):
    # lua-load-per-thread: one Lua state per HAProxy thread. Under the shared state of `lua-load`, HAProxy
    # 2.6 corrupts the guard's Lua stack when two threads stream at once ("attempt to index a thread
    # value") and then aborts, resetting every client (test_stream_guard: concurrent streams)
    return "\n".join(["global",
                      f"    stats socket {paths.socket} mode 600 level admin",
                      "    stats timeout 30s",
                      f"    tune.bufsize {_bufsize(config)}",
                      f'    lua-load-per-thread "{GUARD_LUA}"',
                      "    log stderr format raw local0 warning"])


def _defaults(config):
    t = int(config.stream_timeout_s)
    return "\n".join(["defaults",
                      "    mode http",
                      "    log global",
                      "    option http-buffer-request",
                      "    option http-no-delay",
                      "    timeout connect 2s",
                      f"    timeout client {t}s",
                      f"    timeout server {t}s",
                      "    timeout http-request 30s",
                      "    timeout http-keep-alive 30s",
                      "    timeout queue 30s",
                      "    timeout check 2s",
                      "    retries 3",
                      "    retry-on conn-failure empty-response junk-response",
                      "    option redispatch 1"])


def _frontend(config, paths):
    lines = ["frontend edge",
             f"    bind {_bind(config.host)}:{config.port}",
             "    acl control path /v1/models /health /v1/health",
             "    acl control path_beg /registry/ /v1/models/"] + _request_id() + _stored_response()
    if config.api_keys:
        lines.append(f"    acl key_ok req.hdr(authorization) -f {paths.keys}")
        lines.append(_return(401, "missing or unknown API key", "invalid_request_error", "invalid_api_key",
                             "!key_ok !{ path_beg /registry/ } !{ path /health /v1/health }",
                             extra=" hdr WWW-Authenticate Bearer"))
    lines += [_return(413, f"request body over {config.max_body} bytes", "invalid_request_error",
                      "body_too_large", f"{{ req.body_size gt {config.max_body} }}"),
              "    http-request set-var(txn.model) req.body,json_query('$.model') if METH_POST !control",
              _return(400, "the router needs a JSON body with a string `model`", "invalid_request_error",
                      "model_required", "METH_POST !control !stored !{ var(txn.model) -m found }"),
              _return(404, "this router has no record of that response (it keeps one for 30 minutes after its "
                      "last use); ask the instance that answered it", "invalid_request_error",
                      "response_not_found", "stored !known_response"),
              "    use_backend control if control",
              f"    use_backend m%[var(txn.response_id),{_HOME},sub(1)] if stored known_response",
              f"    use_backend %[var(txn.model),map({paths.models_map})] "
              f"if {{ var(txn.model),map({paths.models_map}) -m found }}",
              "    default_backend no_model"]
    return "\n".join(lines)


def _request_id():
    """One X-Request-Id per request, from the edge on: the instance logs and answers the id the router
    forwarded, and the router's own answers (401, 404, 413, HAProxy's 503) carry it as well."""
    return [f"    acl request_id_ok req.hdr({REQUEST_ID_HEADER}) -m reg {SANE_REQUEST_ID}",
            f"    http-request set-var(txn.request_id) req.hdr({REQUEST_ID_HEADER}) if request_id_ok",
            "    http-request set-var(txn.request_id) uuid unless request_id_ok",
            f"    http-request set-header {REQUEST_ID_HEADER} %[var(txn.request_id)]",
            f"    http-after-response set-header {REQUEST_ID_HEADER} %[var(txn.request_id)]"]


def _stored_response():
    """GET and DELETE /v1/responses/{id} (and its input_items, cancel) carry no `model`: the response id in
    the path picks the model backend that stored it, and that backend's stick table picks the instance."""
    return [f"    acl stored path_reg {STORED_PATH}",
            "    http-request set-var(txn.response_id) path,field(4,/) if stored { path_beg /v1/ }",
            "    http-request set-var(txn.response_id) path,field(3,/) if stored !{ path_beg /v1/ }",
            f"    acl known_response var(txn.response_id),{_HOME} gt 0"]


def _bind(host):
    return f"[{host}]" if ":" in host else host


def _control(config):
    return "\n".join(["backend control", f"    server control 127.0.0.1:{config.control_port}"])


def _model_backend(config, i):
    # the stream guard trusts an early end of input only while a quarter of the buffer or less is in use
    return "\n".join([f"backend {model_backend(i)}",
                      f"    filter lua.pantheon-stream-guard {_bufsize(config) // 4}",
                      f"    http-request set-header {STREAM_END_HEADER} close",
                      "    balance leastconn",
                      "    stick-table type string len 128 size 100k expire 30m",
                      f"    stick on req.hdr({SESSION_HEADER}) if {{ req.hdr({SESSION_HEADER}) -m found }}",
                      # a stored response's id -> its instance; a continuation (previous_response_id) follows
                      f"    stick match {PREVIOUS_RESPONSE} if {{ {PREVIOUS_RESPONSE} -m found }}",
                      "    stick match var(txn.response_id) if { var(txn.response_id) -m found }",
                      f"    stick store-response res.hdr({RESPONSE_ID_HEADER}) if {_STORED_ANSWER}",
                      f"    http-response track-sc1 res.hdr({RESPONSE_ID_HEADER}) table {RESPONSE_HOMES} "
                      f"if {_STORED_ANSWER}",
                      f"    http-response sc-set-gpt0(1) {i + 1} if {_STORED_ANSWER}",
                      "    option httpchk GET /health",
                      "    http-check expect status 200",
                      f"    http-response set-header {INSTANCE_HEADER} %[srv_name]"])


def _response_homes():
    return "\n".join([f"backend {RESPONSE_HOMES}",
                      "    stick-table type string len 128 size 100k expire 30m store gpt0"])


def _no_model():
    return "\n".join(["backend no_model",
                      _return(404, "no live instance serves the requested model (or no such route)",
                              "invalid_request_error", "model_not_found", "TRUE")])
