"""One server address as pantheon-ctl's two clients (admin routes, OpenAI routes) reach it."""

import http.client
import json
import urllib.parse

from pantheon import __version__


class Endpoint:
    """`url` (http:// or https://, optionally with a path prefix) and the bearer token sent to it."""

    def __init__(self, url, token=None):
        parts = urllib.parse.urlsplit(url)
        self.url, self.token = url, token
        self.host, self.port, self.prefix = parts.hostname, parts.port, parts.path.rstrip("/")
        self._cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection

    def connection(self, timeout):
        return self._cls(self.host, self.port, timeout=timeout)

    def encode(self, payload, extra_headers=None):
        """request() keyword arguments: headers, and the JSON body when there is a payload."""
        headers = {"Accept": "application/json", "User-Agent": f"pantheon-ctl/{__version__}", **(extra_headers or {})}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if payload is None:
            return {"headers": headers}
        headers["Content-Type"] = "application/json"
        return {"headers": headers, "body": json.dumps(payload).encode()}


def decode(raw):
    """A reply body: its JSON, or its text when it is not JSON."""
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
