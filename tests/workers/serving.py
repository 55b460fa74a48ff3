"""Start a real bin/pantheon-serve process tree on a free port for end-to-end tests."""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Launched:
    """A bin/ command started in its own session; its output drained into `lines`, `url` once it listens."""

    def __init__(self, cmd, ready_timeout, env=None):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        self.lines = []
        self.url = self._await_listen(ready_timeout, pathlib.Path(cmd[1]).name)
        # keep draining the output: a long run logs more than a pipe holds, and a full pipe blocks the tree
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def _await_listen(self, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{what} exited:\n" + "".join(self.lines))
            self.lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                return m.group(1)
        raise RuntimeError(f"{what} did not listen in time")

    def log(self):
        return "".join(self.lines)

    def request(self, method, path, body=None, headers=None, timeout=60):
        return http_request(self.url, method, path, body, headers, timeout)

    def stop(self, timeout=30):
        """SIGTERM and wait; SIGKILL the whole session after `timeout`. The exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(10)
        return self.proc.returncode


def http_request(base, method, path, body=None, headers=None, timeout=60):
    """(status, body bytes, headers) of one request; a JSON body unless `body` is bytes."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


class Server(Launched):
    """A pantheon-serve process; `url` once it listens and its models have settled (a model settles only
    after its kernels are compiled: minutes on a cold cache and a busy machine); `stop()` sends SIGTERM."""

    def __init__(self, args, ready_timeout=600.0, env=None, program=None):
        program = program or [str(ROOT / "bin" / "pantheon-serve")]
        super().__init__([sys.executable, *program, "--port", "0", *args], ready_timeout, env)
        self._await_health(ready_timeout)

    def _await_health(self, timeout):
        """Until every model given on the command line has settled (loaded or failed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.get("/health")
            models = json.loads(body)["models"] if body else {}
            if status == 200 and all(m["state"] in ("loaded", "failed") for m in models.values()):
                return
            time.sleep(0.1)
        raise RuntimeError("pantheon-serve never became healthy:\n" + "".join(self.lines))

    def get(self, path):
        try:
            status, body, _ = self.request("GET", path, timeout=5)
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # not answering yet
            return 0, b""
        return status, body

    def children(self):
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def open_stream(self, body):
        """A raw streaming request: (socket, bytes up to the first SSE event), for tests that hang up."""
        host, port = self.url.split("//")[1].split(":")
        data = json.dumps(dict(body, stream=True)).encode()
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        seen = b""
        while b"data:" not in seen:
            seen += sock.recv(65536)
        return sock, seen

    def kill_tree(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
