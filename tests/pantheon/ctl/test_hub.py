"""pantheon.ctl.hub against a stand-in server: what a remote's headers may say."""

import http.server

import pytest

from pantheon.ctl import hub
from tests.pantheon.ctl.local_server import LocalServer


def sized(linked):
    """A handler whose HEAD answers X-Linked-Size `linked` (raw bytes, as a hostile server may send them)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            if linked is not None:
                self.send_header("X-Linked-Size", linked.decode("latin-1"))  # sent as latin-1 bytes
            self.send_header("Content-Length", "7")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Handler


@pytest.mark.parametrize("linked, size", [(b"123", 123), (None, 7), (b"\xb2", None), (b"-5", None),
                                          (b"1e3", None), (b"", 7)])
def test_remote_size_reads_only_ascii_digits(linked, size):
    """A latin-1 superscript two is a digit to str.isdigit() but not to int(): an unknown size, not a crash."""
    with LocalServer(sized(linked)) as server:
        assert hub.remote_size(server.url + "/model.gguf") == size
