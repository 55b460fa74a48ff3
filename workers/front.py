"""An HTTP front process: waitress + the Falcon app on the inherited listening socket, over RingBackend."""

import os
import signal
import sys
import threading
import time

from pantheon.serve.http.admin import admin_enabled
from pantheon.serve.http.app import create_app
from pantheon.serve.metrics import Recorder
from pantheon.serve.response_store import ResponseStore
from workers.fleet_report import start_registrar
from workers.http_server import create_front_server
from workers.ring_admin import RingAdmin
from workers.ring_backend import RingBackend

DRAIN_S = 10.0  # under the supervisor's GRACE_S, which then kills what is left
FLUSH_S = 1.0  # for the error events of streams that outlived the drain to reach their sockets


def front_main(layout, f, sock, config, store_path=None):
    store = ResponseStore(store_path, config.responses_store_mb << 20) if store_path else None
    backend = RingBackend(layout, f, {m.name: m.chat_template for m in config.models if m.chat_template})
    backend.start()
    recorder = Recorder(layout.metrics, layout.metrics_rows, row=f)
    app = create_app(backend, api_keys=config.api_keys, metrics=recorder, admin=RingAdmin(backend),
                     admin_token=config.admin_token, admin_on=admin_enabled(config.host, config.admin_token),
                     cors_origins=config.cors_origins, reasoning_format=config.reasoning_format,
                     body_limit=config.http.body_limit, response_store=store,
                     sse_keepalive=config.http.sse_keepalive, prefill_assistant=config.prefill_assistant)
    server = create_front_server(app, sock, config.http)
    registrar = start_registrar(config, sock, backend, _log) if f == 0 else None
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=_drain, args=(backend, registrar, server),
                                                              daemon=True).start())
    server.run()
    return 0


def _log(msg):
    print(f"pantheon-serve: {msg}", file=sys.stderr, flush=True)


def _drain(backend, registrar, server):
    """Leave the router's fleet, refuse new generations (503, /health says draining), let running
    streams finish within the grace period, end the rest with an error event and [DONE], let every
    response's last bytes reach its socket, then exit."""
    if registrar is not None:
        registrar.deregister()
    backend.draining = True
    deadline = time.monotonic() + DRAIN_S
    while backend.active() and time.monotonic() < deadline:
        time.sleep(0.05)
    if backend.active():
        backend.end_all("the server is shutting down and this stream outlived the drain period")
    # a stream leaves the backend at its DONE frame, before its HTTP thread has written the last chunks
    # ([DONE], the chunked terminator): exiting then would cut them off
    flushed = time.monotonic() + FLUSH_S
    while server.responding() and time.monotonic() < flushed:
        time.sleep(0.02)
    os._exit(0)
