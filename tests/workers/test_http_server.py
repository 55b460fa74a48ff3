"""The front's waitress server: a stream of unknown length is chunked, or close-delimited when the router asks."""

import socket
import threading

import pytest

from pantheon.serve.settings import STREAM_END_HEADER
from pantheon.serve.settings import HttpLimits
from tests.pantheon.serve.http.server import stop
from workers.http_server import create_front_server


def _app(environ, start_response):
    if environ["PATH_INFO"] == "/fixed":
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
        return [b"{}"]
    start_response("200 OK", [("Content-Type", "text/event-stream")])
    return iter([b"data: 1\n\n", b"data: [DONE]\n\n"])


@pytest.fixture(scope="module")
def front():
    sock = socket.create_server(("127.0.0.1", 0))
    server = create_front_server(_app, sock, HttpLimits(threads=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop(server, thread)


def _exchange(port, path, extra=""):
    """The whole raw response; the read ends when the server closes or after a keep-alive pause."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
        s.settimeout(1.0)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except socket.timeout:
            return data, False
        return data, True


def test_a_stream_is_chunked(front):
    data, _ = _exchange(front, "/stream")
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in head
    assert body.endswith(b"0\r\n\r\n")


def test_the_router_gets_a_close_delimited_http11_stream(front):
    data, closed = _exchange(front, "/stream", f"{STREAM_END_HEADER}: close\r\n")
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in head, head
    assert b"Transfer-Encoding" not in head and b"Content-Length" not in head
    assert body == b"data: 1\n\ndata: [DONE]\n\n" and closed


def test_a_response_of_known_length_is_unchanged_for_the_router(front):
    data, closed = _exchange(front, "/fixed", f"{STREAM_END_HEADER}: close\r\n")
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 2" in head and body == b"{}" and not closed
