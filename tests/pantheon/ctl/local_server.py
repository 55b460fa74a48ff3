"""A threaded http.server on 127.0.0.1:0 for the pantheon-ctl tests' stand-in servers."""

import http.server
import threading


class LocalServer:
    """Serves `handler` (a BaseHTTPRequestHandler class) on a free port once entered (or `start()`ed)."""

    def __init__(self, handler, poll_s=0.5):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(poll_s,), daemon=True)

    def start(self):
        self.thread.start()
        return self

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
