"""A tiny local stand-in for the HuggingFace hub: the metadata API and ranged file downloads of repos
made in a test, with a log of every request and byte served (HF_ENDPOINT points at it)."""

import hashlib
import http.server
import json
import re
from dataclasses import dataclass, field

from tests.pantheon.ctl.local_server import LocalServer

_API = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/?]+))?")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Hit:
    method: str
    path: str
    range: str
    sent: int = 0


@dataclass
class Hub:
    """repos: repo id -> {file name: bytes}; `listed_size` overrides a file's size in the API;
    `drop_after`: the next GET of more bytes than that sends that many and hangs up; later GETs get 500."""

    repos: dict
    listed_size: dict = field(default_factory=dict)
    drop_after: int = None
    broken: bool = False
    hits: list = field(default_factory=list)

    def served(self, name):
        """Bytes of file `name` sent in all."""
        return sum(h.sent for h in self.hits if h.path.endswith("/" + name))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: Hub = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._serve(body=True)

    def do_HEAD(self):
        self._serve(body=False)

    def _serve(self, body):
        hit = Hit(self.command, self.path.split("?")[0], self.headers.get("Range", ""))
        self.hub.hits.append(hit)
        m = _API.match(self.path)
        if m:
            return self._api(m[1])
        m = _RESOLVE.match(hit.path)
        files = self.hub.repos.get(m[1], {}) if m else {}
        if not m or m[3] not in files:
            return self._reply(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"})
        self._file(hit, files[m[3]], body)

    def _api(self, repo):
        files = self.hub.repos.get(repo)
        if files is None:
            return self._reply(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})
        siblings = [{"rfilename": n, "size": self.hub.listed_size.get(n, len(d)), "blobId": _sha1(d),
                     "lfs": {"sha256": hashlib.sha256(d).hexdigest(), "size": self.hub.listed_size.get(n, len(d)),
                             "pointerSize": 134}} for n, d in files.items()]
        payload = {"id": repo, "modelId": repo, "sha": COMMIT, "private": False, "siblings": siblings}
        self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def _file(self, hit, data, body):
        headers = {"ETag": f'"{_sha1(data)}"', "X-Repo-Commit": COMMIT, "Accept-Ranges": "bytes"}
        if body and self.hub.broken:
            return self._reply(500, b"broken", {})
        m = _RANGE.match(hit.range)
        start, end = (int(m[1]), int(m[2]) if m and m[2] else len(data) - 1) if m else (0, len(data) - 1)
        chunk = data[start:end + 1]
        status = 206 if m else 200
        if m:
            headers["Content-Range"] = f"bytes {start}-{start + len(chunk) - 1}/{len(data)}"
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(chunk))}.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self._send(hit, chunk)

    def _send(self, hit, chunk):
        if self.hub.drop_after is not None and len(chunk) > self.hub.drop_after:
            chunk, self.hub.drop_after, self.hub.broken = chunk[:self.hub.drop_after], None, True
            self.close_connection = True
        self.wfile.write(chunk)
        self.wfile.flush()
        hit.sent = len(chunk)

    def _reply(self, status, payload, headers):
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(payload))}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


def _sha1(data):
    return hashlib.sha1(data).hexdigest()


class HubServer(LocalServer):
    """Serve `hub` on 127.0.0.1; `endpoint` for HF_ENDPOINT; use as a context manager."""

    def __init__(self, hub):
        super().__init__(type("Handler", (_Handler,), {"hub": hub}))
        self.endpoint = self.url
