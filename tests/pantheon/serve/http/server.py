"""A real waitress server on port 0 in a background thread, for tests that speak HTTP."""

import http.client
import json
import threading

import waitress
from waitress import wasyncore

import pantheon
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.serve.http.app import create_app
from pantheon.serve.local_backend import LocalBackend
from pantheon.serve.response_store import ResponseStore
from tests.conftest import shared_path

GOLDEN = {"qwen2": "qwen2-q8_0.gguf", "llama": "llama-q8_0.gguf"}
CHAT_N_CTX = 512  # room for a tool-calling prompt under Qwen2.5's template (the Ollama and Anthropic tests')


def open_models(names=("qwen2", "llama")):
    """Fresh Model objects (each backend gets its own: engines never share one across threads)."""
    return {name: pantheon.open_model(str(shared_path("golden", GOLDEN[name])), threads=1) for name in names}


def greedy_ids(model, ids, n, n_ctx):
    """The n greedy token ids (fewer at EOS) the engine gives the prompt `ids`, outside any server."""
    engine = Engine(model, EngineConfig(n_ctx=n_ctx))
    engine.add(Request(1, tuple(ids), n, SamplingParams(temperature=0.0), frozenset(model.tokenizer.stop_ids)))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return out


def qwen_served(n_ctx=256, **app_kwargs):
    """The golden qwen2 model under its real chat template (Qwen2.5's), for the chat-shaped tests."""
    template = shared_path("templates", "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    return Served(open_models(("qwen2",)), n_ctx=n_ctx, chat_templates={"qwen2": template}, **app_kwargs)


def stored_served(directory, limit=1 << 20, n_ctx=CHAT_N_CTX, **kwargs):
    """qwen_served with a Responses store of `limit` bytes in `directory` (as `.store`)."""
    store = ResponseStore(directory / "responses.sqlite", limit)
    server = qwen_served(n_ctx, response_store=store, **kwargs)
    server.store = store
    return server


class Served:
    """LocalBackend + create_app under waitress with channel_request_lookahead, as in production."""

    def __init__(self, models, n_ctx=256, max_concurrent=4, max_queue=8, api_keys=(), chat_templates=None,
                 **app_kwargs):
        self.backend = LocalBackend(models, EngineConfig(n_ctx=n_ctx, max_batch=4, prefill_chunk=64),
                                    max_concurrent=max_concurrent, max_queue=max_queue, chat_templates=chat_templates)
        app = create_app(self.backend, api_keys=api_keys, metrics=self.backend.recorder, **app_kwargs)
        self.server = waitress.create_server(app, host="127.0.0.1", port=0, threads=8,
                                             channel_request_lookahead=5, clear_untrusted_proxy_headers=True)
        self.port = self.server.effective_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.run, name="waitress-test", daemon=True)
        self.thread.start()

    def close(self):
        stop(self.server, self.thread)
        self.backend.close()


def stop(server, thread):
    """Stop a waitress server run in `thread`: its sockets and trigger pipe close in the loop thread itself.

    Closing them from the test's thread while the loop sits in select() fails that select with EBADF, kills the
    loop with the accepted channels still open, and leaves their descriptors to be closed by whichever later
    test's garbage collection finds them (or the loop selects on a number a later test has reused).
    """
    server.task_dispatcher.shutdown(timeout=5)
    server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
    thread.join(timeout=10)
    assert not thread.is_alive(), "the waitress loop did not stop"


def call(port, method, path, body=None, headers=None, raw=None):
    """(status, headers (case-insensitive), decoded JSON or text) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        conn.request(method, path, body=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        resp = conn.getresponse()
        payload = resp.read().decode()
        kind = resp.getheader("Content-Type") or ""
        return resp.status, resp.headers, json.loads(payload) if "json" in kind else payload
    finally:
        conn.close()


def named_events(port, path, body):
    """(status, [(event name, data object)]) of one streamed request whose SSE blocks name their event
    (Anthropic's and the Responses API's streams), read raw."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps(dict(body, stream=True)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        events = []
        for block in resp.read().decode().split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in lines:
                events.append((lines["event"], json.loads(lines["data"])))
        return resp.status, events
    finally:
        conn.close()
